package deploy_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	promqlengine "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/proctest"
)

// The metric names the dashboard and the rules use are checked against
// what a real worker exports: the reference build's binary, migrated with
// `effectively migrate`, run on the real stack with a workload that makes
// every series appear. client_golang writes a labelled family's # TYPE line
// only after its first observation, so the workload provokes each one:
// good records (events, batches, lag, outbox deliveries to a local target),
// undecodable records (dead letters), and a batch whose database connection
// is terminated while it waits on a lock (a retry, with its cause and the
// retrying state). The families are collected from every scrape of the run
// (a retry's cause exists only while it retries) and compared by name:
// a histogram's _bucket, _sum and _count are its family's.

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// buildBinary builds the reference build's binary once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "effectively-deploy-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "effectively")
		out, err := exec.Command("go", "build", "-o", binary, "../cmd/effectively").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("building effectively: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binary
}

// families scrapes addr's /metrics and returns its families by name.
func families(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return mfs
}

func sum(mf *dto.MetricFamily) float64 {
	total := 0.0
	for _, m := range mf.GetMetric() {
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return total
}

// exported reports whether name is a series of one of the families: the
// family itself, or a histogram's (summary's) _bucket, _sum or _count.
func exported(name string, fams map[string]dto.MetricType) bool {
	if _, ok := fams[name]; ok {
		return true
	}
	for suffix, types := range map[string][]dto.MetricType{
		"_bucket": {dto.MetricType_HISTOGRAM},
		"_sum":    {dto.MetricType_HISTOGRAM, dto.MetricType_SUMMARY},
		"_count":  {dto.MetricType_HISTOGRAM, dto.MetricType_SUMMARY},
	} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if typ, ok := fams[base]; ok && contains(types, typ) {
				return true
			}
		}
	}
	return false
}

func contains(ts []dto.MetricType, t dto.MetricType) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

func TestQueriesUseExportedMetrics(t *testing.T) {
	used := usedMetrics(t)
	bin := buildBinary(t)
	db := pgtest.NewEmpty(t)
	topic := kafkatest.NewTopic(t, 2)
	group := kafkatest.NewGroup(t)
	brokers := strings.Join(kafkatest.Brokers(t), ",")

	// The outbox's targets: answer every call.
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(target.Close)

	addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	env := []string{
		"EFFECTIVELY_KAFKA_BROKERS=" + brokers,
		"EFFECTIVELY_KAFKA_GROUP=" + group,
		"EFFECTIVELY_KAFKA_TOPICS=" + topic,
		"EFFECTIVELY_POSTGRES_URL=" + db.URL,
		"EFFECTIVELY_HTTP_ADDR=" + addr,
		"EFFECTIVELY_RETRY_MAX=1s",
		"EFFECTIVELY_TARGETS_CRM_URL=" + target.URL,
		"EFFECTIVELY_TARGETS_MAIL_URL=" + target.URL,
	}

	// The schema, as the chart's migrate Job makes it.
	code, _, stderr := proctest.Run(t, bin, env, "migrate")
	require.Equal(t, 0, code, "effectively migrate: %s", stderr)

	// Good records: a generated workload.
	expect := filepath.Join(t.TempDir(), "expect.json")
	code, _, stderr = proctest.Run(t, bin, env, "produce", "--topic", topic, "--events", "400", "--expect", expect)
	require.Equal(t, 0, code, "effectively produce: %s", stderr)
	// Bad records: dead letters with two reasons.
	producer := kafkatest.Producer(t, kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, producer.ProduceSync(ctx,
		&kgo.Record{Key: []byte("bad-1"), Value: []byte(`{"specversion":"1.0",`)},
		&kgo.Record{Key: []byte("bad-2"), Value: []byte(`{"hello":"world"}`)},
	).FirstErr())

	worker := proctest.Start(t, bin, env, "run")
	seen := map[string]dto.MetricType{}
	var scrapes []scraped
	scrape := func() map[string]*dto.MetricFamily {
		mfs := families(t, addr)
		scrapes = append(scrapes, scraped{at: time.Now(), families: mfs})
		for name, mf := range mfs {
			seen[name] = mf.GetType()
		}
		return mfs
	}
	proctest.WaitUntil(t, "the workload and the bad records applied", 2*time.Minute, func(context.Context) bool {
		if worker.Exited() {
			t.Fatalf("the worker exited: %s", proctest.Tail(worker.Stderr.String(), 30))
		}
		return db.Count(t, `SELECT count(*) FROM dead_letters`) == 2 && hasFamily(t, addr, "effectively_outbox_deliveries_total")
	})
	scrape()

	// A retry: hold a lock every batch needs, send a record, and terminate
	// the connection of the batch waiting for the lock.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, `LOCK TABLE consumer_offsets IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Key: []byte("late"), Value: []byte(`{"hello":"again"}`)}).FirstErr())
	proctest.WaitUntil(t, "a batch retried", time.Minute, func(ctx context.Context) bool {
		_, _ = db.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database() AND pid <> pg_backend_pid()`)
		mfs := scrape()
		return sum(mfs["effectively_batch_retries_total"]) > 0
	})
	time.Sleep(2 * time.Second) // scrape the retrying state a few more times
	scrape()
	require.NoError(t, tx.Rollback(ctx))
	proctest.WaitUntil(t, "the late record dead-lettered after the retry", time.Minute, func(context.Context) bool {
		return db.Count(t, `SELECT count(*) FROM dead_letters`) == 3
	})
	scrape()

	var missing []string
	for name, where := range used {
		if synthesized[name] || exported(name, seen) {
			continue
		}
		sort.Strings(where)
		missing = append(missing, fmt.Sprintf("%s (used in %s)", name, strings.Join(compact(where), "; ")))
	}
	sort.Strings(missing)
	require.Empty(t, missing, "metrics the dashboard or the alert rules use that the worker does not export:\n%s", strings.Join(missing, "\n"))

	panelsReturnData(t, scrapes)
}

// scraped is one scrape of the worker.
type scraped struct {
	at       time.Time
	families map[string]*dto.MetricFamily
}

// panelsReturnData evaluates every dashboard query (its variables set to
// "all") with Prometheus' engine over the run's scrapes, at each scrape's
// time, and requires each to return series at some point of the run: a
// query whose metric exists can still select nothing through a wrong label
// or label value (state="retryng", by (partiton)), which parsing does not
// see.
func panelsReturnData(t *testing.T, scrapes []scraped) {
	t.Helper()
	store := storeOf(scrapes)
	engine := promqlengine.NewEngine(promqlengine.EngineOpts{MaxSamples: 1e7, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	var empty []string
	for _, q := range dashboardQueries(t) {
		if strings.Contains(q.where, ": variable ") {
			continue // a selector of label_values, checked with the panels' metrics
		}
		found := false
		for _, sc := range scrapes {
			iq, err := engine.NewInstantQuery(context.Background(), store, nil, substituteGrafana(q.expr), sc.at)
			require.NoError(t, err, q.expr)
			res := iq.Exec(context.Background())
			require.NoError(t, res.Err, q.expr)
			vec, err := res.Vector()
			require.NoError(t, err, q.expr)
			iq.Close()
			if len(vec) > 0 {
				found = true
				break
			}
		}
		if !found {
			empty = append(empty, q.where+": "+q.expr)
		}
	}
	require.Empty(t, empty, "dashboard queries that returned nothing at any of %d scrapes of the live worker", len(scrapes))
}

// storeOf turns scrapes into series, histograms as their _bucket, _sum and
// _count series, each sample at its scrape's time.
func storeOf(scrapes []scraped) memStore {
	samples := map[string][]chunks.Sample{}
	lsets := map[string]labels.Labels{}
	add := func(name string, m *dto.Metric, extra []string, v float64, at time.Time) {
		b := labels.NewBuilder(labels.EmptyLabels())
		b.Set(labels.MetricName, name)
		for _, lp := range m.GetLabel() {
			b.Set(lp.GetName(), lp.GetValue())
		}
		for i := 0; i+1 < len(extra); i += 2 {
			b.Set(extra[i], extra[i+1])
		}
		lset := b.Labels()
		key := lset.String()
		lsets[key] = lset
		samples[key] = append(samples[key], fsample{t: at.UnixMilli(), f: v})
	}
	for _, sc := range scrapes {
		for name, mf := range sc.families {
			for _, m := range mf.GetMetric() {
				switch mf.GetType() {
				case dto.MetricType_COUNTER:
					add(name, m, nil, m.GetCounter().GetValue(), sc.at)
				case dto.MetricType_GAUGE:
					add(name, m, nil, m.GetGauge().GetValue(), sc.at)
				case dto.MetricType_UNTYPED:
					add(name, m, nil, m.GetUntyped().GetValue(), sc.at)
				case dto.MetricType_HISTOGRAM:
					h := m.GetHistogram()
					for _, bk := range h.GetBucket() {
						add(name+"_bucket", m, []string{"le", strconv.FormatFloat(bk.GetUpperBound(), 'g', -1, 64)}, float64(bk.GetCumulativeCount()), sc.at)
					}
					add(name+"_bucket", m, []string{"le", "+Inf"}, float64(h.GetSampleCount()), sc.at)
					add(name+"_sum", m, nil, h.GetSampleSum(), sc.at)
					add(name+"_count", m, nil, float64(h.GetSampleCount()), sc.at)
				case dto.MetricType_SUMMARY:
					add(name+"_sum", m, nil, m.GetSummary().GetSampleSum(), sc.at)
					add(name+"_count", m, nil, float64(m.GetSummary().GetSampleCount()), sc.at)
				}
			}
		}
	}
	var store memStore
	for key, ss := range samples {
		store = append(store, storage.NewListSeries(lsets[key], ss))
	}
	return store
}

func hasFamily(t *testing.T, addr, name string) bool {
	t.Helper()
	_, ok := families(t, addr)[name]
	return ok
}

func compact(s []string) []string {
	var out []string
	for i, e := range s {
		if i == 0 || s[i-1] != e {
			out = append(out, e)
		}
	}
	return out
}
