package deploy_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	promqlengine "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/proctest"
)

// The recording's shape and its replay.
const (
	// ruleStep is the rule time between two replayed scrapes: Prometheus'
	// common scrape and rule evaluation interval.
	ruleStep = 15 * time.Second
	// realStep is the real time between two scrapes of the recording.
	realStep = time.Second
	// beforeCut, cutScrapes and afterDrain are the scrapes before the cut,
	// during it, and after the lag is back to 0.
	beforeCut  = 10
	cutScrapes = 120
	afterDrain = 30
	// produceEvery and produceBatch pace the stream of records: 50 a second.
	produceEvery = time.Second
	produceBatch = 50
	// partitions of the worker's topic.
	partitions = 2
)

// TestAlertsFireDuringACutAndClearAfterTheHeal runs the reference build on
// the real stack with PostgreSQL behind a TCP proxy, under a steady stream
// of the reference domain's records (50 a second over 2 partitions), and
// scrapes its /metrics once a second: 10 scrapes, then the proxy cuts
// PostgreSQL (every connection closed, new ones refused) for 120 scrapes,
// then it heals, and the scrapes go on until the lag is back to 0 and 30
// more. Every rule of alerts.yaml is then evaluated with Prometheus' engine
// at every scrape of the recording, and the test requires that
// EffectivelyDependencyDown fired for postgres (never for kafka) and
// EffectivelyLagGrowing fired during the cut, and that nothing fires at the
// end.
//
// The rules are written for hours, the recording lasts minutes: it is
// replayed with its scrapes 15 s apart in rule time (Prometheus' common
// scrape and evaluation interval), so N real scrapes span N×15 s of rule
// time, and a rule is evaluated at every scrape. About 165 scrapes are 41
// minutes of rule time; the 120-scrape cut is 30 minutes. The arithmetic of
// EffectivelyLagGrowing (lag > 1000 and deriv over 10m > 0, for 15m): each
// partition's lag grows by 25 records a second of the cut, so it passes
// 1000 after about 40 scrapes (10 minutes of rule time; deriv's window
// needs only two samples and sees the rise from the first ones); the
// expression must then hold at the 61 evaluations of [T−15m, T], so the
// alert fires from about the 100th scrape of the cut (25 minutes; the
// partitions' alerts fired at its 99th and 104th in one run) to its end. EffectivelyDependencyDown's 2m is 8 scrapes
// after the worker marks PostgreSQL down, 2 failed probes 2 s apart: its
// probing is not scaled, so it reports within about 4 s (a minute of rule
// time) what a worker on the real clock reports in 4 s. "for" is
// Prometheus' rule manager's, done here: an alert fires at step T when its
// expression returned the series at every step of [T−for, T].
//
// The replay keeps what Prometheus would store: each scrape's series with
// the target's job and instance labels, up (1, or 0 for a failed scrape),
// and a staleness marker when a series disappears. Gauges whose value is a
// time on the worker's clock are moved onto the rule clock with the
// samples: a *_timestamp_seconds value is mapped as the scrapes' own times
// are (interpolated between the two scrapes around it), and an age
// (*_oldest_*_seconds) is multiplied by 15; otherwise time() −
// effectively_pruner_last_pass_timestamp_seconds would grow 14 s a scrape
// and EffectivelyPrunerStalled fire on a healthy pruner. For the same
// reason the worker's own intervals the rules depend on are divided by 15:
// the pruner runs every 4 s (the default minute) and a retry waits at most
// 2 s (the default 30 s).
func TestAlertsFireDuringACutAndClearAfterTheHeal(t *testing.T) {
	t.Parallel()
	rules := cutRules(t)
	bin := buildBinary(t)
	db := pgtest.NewEmpty(t)
	topic := kafkatest.NewTopic(t, partitions)
	group := kafkatest.NewGroup(t)
	link := newPGLink(t, db.URL)
	addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	env := func(pgURL string) []string {
		return []string{
			"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(t), ","),
			"EFFECTIVELY_KAFKA_GROUP=" + group,
			"EFFECTIVELY_KAFKA_TOPICS=" + topic,
			"EFFECTIVELY_POSTGRES_URL=" + pgURL,
			"EFFECTIVELY_HTTP_ADDR=" + addr,
			"EFFECTIVELY_RETRY_MAX=2s",
			"EFFECTIVELY_DEDUPE_PRUNE_INTERVAL=4s",
		}
	}
	code, _, stderr := proctest.Run(t, bin, env(db.URL), "migrate")
	require.Equal(t, 0, code, "effectively migrate: %s", stderr)
	worker := proctest.Start(t, bin, env(link.url), "run")
	stream := produceSteadily(t, bin, env(link.url), topic)

	rec := &recording{t: t, addr: addr, worker: worker}
	proctest.WaitUntil(t, "the worker applying the stream", time.Minute, func(context.Context) bool {
		rec.alive()
		mfs, err := scrapeMetrics(addr)
		return err == nil && len(lags(mfs)) == partitions && db.Count(t, `SELECT count(*) FROM effectively_claims`) > 0
	})

	tick := time.NewTicker(realStep)
	defer tick.Stop()
	record := func(n int) {
		for range n {
			<-tick.C
			rec.scrape()
		}
	}
	record(beforeCut)
	link.cut(t)
	rec.cut = len(rec.scrapes)
	record(cutScrapes)
	link.heal(t)
	rec.heal = len(rec.scrapes)
	for drained := false; !drained; {
		<-tick.C
		sc := rec.scrape()
		lag := lags(sc.families)
		drained = len(lag) == partitions && sum0(lag) == 0
		if !drained && len(rec.scrapes)-rec.heal > 90 {
			t.Fatalf("the lag is not back to 0 90 s after the heal: %v", lag)
		}
	}
	rec.drained = len(rec.scrapes)
	record(afterDrain)
	produced := stream.stop(t)

	fired := evaluate(t, rules, rec)

	// What fired, and when.
	realSpan := rec.scrapes[len(rec.scrapes)-1].at.Sub(rec.scrapes[0].at)
	t.Logf("%d scrapes in %s (%s of rule time): cut at scrape %d (%s), healed at scrape %d (%s, after %s), lag 0 at scrape %d (%s); %d records produced (%.0f a second); %d failed scrapes",
		len(rec.scrapes), realSpan.Round(100*time.Millisecond), rec.ruleOffset(len(rec.scrapes)-1),
		rec.cut, rec.when(rec.cut), rec.heal, rec.when(rec.heal), rec.scrapes[rec.heal].at.Sub(rec.scrapes[rec.cut].at).Round(100*time.Millisecond),
		rec.drained-1, rec.when(rec.drained-1), produced, float64(produced)/realSpan.Seconds(), rec.failed)
	peak, peakAt := rec.lagPeak()
	t.Logf("lag peak: %v records (sum over partitions) at scrape %d (%s), by partition %v", peak, peakAt, rec.when(peakAt), lags(rec.scrapes[peakAt].families))
	for _, f := range fired.runs() {
		t.Logf("fired %s%s: scrapes %d–%d, %s to %s", f.alert, f.series, f.from, f.to, rec.when(f.from), rec.when(f.to))
	}

	during := func(alert string, match func(labels.Labels) bool) bool {
		for i := rec.cut; i < rec.heal; i++ {
			for _, s := range fired.at[i][alert] {
				if match(s) {
					return true
				}
			}
		}
		return false
	}
	require.True(t, during("EffectivelyDependencyDown", func(s labels.Labels) bool { return s.Get("dependency") == "postgres" }),
		"EffectivelyDependencyDown did not fire for postgres during the cut")
	require.True(t, during("EffectivelyLagGrowing", func(labels.Labels) bool { return true }),
		"EffectivelyLagGrowing did not fire during the cut")
	for i := range rec.scrapes {
		for _, s := range fired.at[i]["EffectivelyDependencyDown"] {
			require.NotEqual(t, "kafka", s.Get("dependency"), "EffectivelyDependencyDown fired for kafka at %s: only PostgreSQL was cut", rec.when(i))
		}
	}
	require.Empty(t, fired.at[len(rec.scrapes)-1], "alerts firing at the last scrape, after the heal and the drain")
}

// cutRule is an alerting rule to evaluate.
type cutRule struct {
	alert, expr string
	hold        time.Duration // the rule's "for"
}

// cutRules are the rules of alerts.yaml. A gauge of seconds that a rule
// uses must be one the replay knows how to move onto the rule clock.
func cutRules(t *testing.T) []cutRule {
	t.Helper()
	queries, groups := alertQueries(t)
	for _, q := range queries {
		names, err := metricNames(q)
		require.NoError(t, err)
		for _, n := range names {
			if strings.HasSuffix(n, "_seconds") {
				require.True(t, clockInstant(n) || clockAge(n),
					"%s uses %s, a value in seconds: say in clockInstant or clockAge (alerts_cut_test.go) whether it is a time or an age, so the replay moves it onto the rule clock", q.where, n)
			}
		}
	}
	var out []cutRule
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			require.Zero(t, r.KeepFiringFor, "%s: keep_firing_for is not evaluated here; add it to evaluate", r.Alert)
			out = append(out, cutRule{alert: r.Alert, expr: r.Expr, hold: time.Duration(r.For)})
		}
	}
	return out
}

// clockInstant reports whether the gauge name holds a Unix time.
func clockInstant(name string) bool { return strings.HasSuffix(name, "_timestamp_seconds") }

// clockAge reports whether the gauge name holds an age.
func clockAge(name string) bool {
	return strings.Contains(name, "_oldest_") && strings.HasSuffix(name, "_seconds")
}

// pgLink is PostgreSQL behind a TCP proxy in the test process.
type pgLink struct {
	proxy *toxiproxy.Proxy
	// url is the test schema's URL through the proxy.
	url string
}

// newPGLink proxies a free local port to the server of dbURL. The proxy
// keeps the address it bound, so a restarted proxy listens where the
// worker connects.
func newPGLink(t *testing.T, dbURL string) *pgLink {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "postgres", "127.0.0.1:0", u.Host)
	require.NoError(t, server.Collection.Add(p, true))
	t.Cleanup(func() { require.NoError(t, server.Collection.Clear()) })
	u.Host = p.Listen
	return &pgLink{proxy: p, url: u.String()}
}

// cut closes every connection and refuses new ones.
func (l *pgLink) cut(*testing.T) { l.proxy.Stop() }

// heal listens again on the same address.
func (l *pgLink) heal(t *testing.T) {
	t.Helper()
	require.NoError(t, l.proxy.Start(), "restarting the proxy on %s", l.proxy.Listen)
}

// stream is the steady production of records.
type stream struct {
	cancel   context.CancelFunc
	done     chan struct{}
	produced atomic.Int64
	mu       sync.Mutex
	errs     []error
}

// produceSteadily runs the reference binary's `produce` once every
// produceEvery until stop: each run a fresh generated workload of
// produceBatch records (its own seed, so its own event ids).
func produceSteadily(t *testing.T, bin string, env []string, topic string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(produceEvery)
		defer tick.Stop()
		for seed := 1; ; seed++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			code, _, stderr := proctest.Run(t, bin, env, "produce", "--topic", topic,
				"--events", strconv.Itoa(produceBatch), "--seed", strconv.Itoa(seed))
			if code != 0 {
				s.fail(fmt.Errorf("effectively produce (seed %d): exit %d: %s", seed, code, stderr))
				return
			}
			s.produced.Add(produceBatch)
		}
	}()
	t.Cleanup(func() { cancel(); <-s.done })
	return s
}

func (s *stream) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

// stop ends the stream, waits for its records' acknowledgements and
// returns how many were produced; every one must have been.
func (s *stream) stop(t *testing.T) int64 {
	t.Helper()
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Empty(t, s.errs, "producing the stream")
	return s.produced.Load()
}

// recording is the worker's scrapes.
type recording struct {
	t      *testing.T
	addr   string
	worker *proctest.Proc
	// scrapes in real time; a failed scrape has no families.
	scrapes []scraped
	failed  int
	// cut, heal and drained are the indexes of the first scrape after the
	// cut, after the heal, and after the lag was back to 0.
	cut, heal, drained int
}

// alive fails the test if the worker exited.
func (r *recording) alive() {
	r.t.Helper()
	if r.worker.Exited() {
		r.t.Fatalf("the worker exited: %s", proctest.Tail(r.worker.Stderr.String(), 30))
	}
}

// scrape records one scrape of the worker. A scrape that fails is recorded
// as Prometheus records it: up 0, every series stale.
func (r *recording) scrape() scraped {
	r.t.Helper()
	r.alive()
	at := time.Now()
	mfs, err := scrapeMetrics(r.addr)
	if err != nil {
		r.failed++
		r.t.Logf("scrape %d failed: %v", len(r.scrapes), err)
		mfs = nil
	}
	sc := scraped{at: at, families: mfs}
	r.scrapes = append(r.scrapes, sc)
	return sc
}

// scrapeMetrics is one scrape, with Prometheus' habit of giving up on a
// target that does not answer within its interval.
func scrapeMetrics(addr string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), realStep)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// lags is effectively_consumer_lag by partition.
func lags(mfs map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, m := range mfs["effectively_consumer_lag"].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "partition" {
				out[lp.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

func sum0(m map[string]float64) float64 {
	total := 0.0
	for _, v := range m {
		total += v
	}
	return total
}

// lagPeak is the largest total lag of the recording and its scrape.
func (r *recording) lagPeak() (float64, int) {
	peak, at := 0.0, 0
	for i, sc := range r.scrapes {
		if l := sum0(lags(sc.families)); l > peak {
			peak, at = l, i
		}
	}
	return peak, at
}

// ruleAt is scrape i's time on the rule clock: the first scrape's real
// time, then ruleStep a scrape.
func (r *recording) ruleAt(i int) time.Time {
	return r.scrapes[0].at.Add(time.Duration(i) * ruleStep)
}

func (r *recording) ruleOffset(i int) time.Duration { return time.Duration(i) * ruleStep }

// when names scrape i's time: on the rule clock, in real time, both from
// the first scrape.
func (r *recording) when(i int) string {
	return fmt.Sprintf("rule +%s / real +%.1fs", r.ruleOffset(i), r.scrapes[i].at.Sub(r.scrapes[0].at).Seconds())
}

// speed is rule seconds per real second over the recording.
func (r *recording) speed() float64 {
	n := len(r.scrapes) - 1
	return r.ruleOffset(n).Seconds() / r.scrapes[n].at.Sub(r.scrapes[0].at).Seconds()
}

// onRuleClock maps a Unix time of the worker's clock to the rule clock:
// between two scrapes, interpolated between their rule times; before the
// first or after the last, at the recording's speed.
func (r *recording) onRuleClock(unix float64) float64 {
	realT := func(i int) float64 { return float64(r.scrapes[i].at.UnixNano()) / 1e9 }
	rule := func(i int) float64 { return float64(r.ruleAt(i).UnixNano()) / 1e9 }
	last := len(r.scrapes) - 1
	switch {
	case unix <= realT(0):
		return rule(0) - (realT(0)-unix)*r.speed()
	case unix >= realT(last):
		return rule(last) + (unix-realT(last))*r.speed()
	}
	i := sort.Search(last, func(i int) bool { return realT(i+1) >= unix })
	return rule(i) + (unix-realT(i))/(realT(i+1)-realT(i))*ruleStep.Seconds()
}

// store is the recording as Prometheus would have stored it, on the rule
// clock: every series with the target's labels, up, staleness markers, and
// clock-valued gauges moved onto the rule clock.
func (r *recording) store() memStore {
	target := []*dto.LabelPair{{Name: ptr("job"), Value: ptr("effectively")}, {Name: ptr("instance"), Value: ptr(r.addr)}}
	replayed := make([]scraped, len(r.scrapes))
	var up []chunks.Sample
	for i, sc := range r.scrapes {
		at := r.ruleAt(i)
		replayed[i] = scraped{at: at, families: map[string]*dto.MetricFamily{}}
		v := 0.0
		if sc.families != nil {
			v = 1
		}
		up = append(up, fsample{t: at.UnixMilli(), f: v})
		for name, mf := range sc.families {
			out := &dto.MetricFamily{Name: mf.Name, Type: mf.Type}
			for _, m := range mf.GetMetric() {
				c := &dto.Metric{Label: append(append([]*dto.LabelPair{}, m.GetLabel()...), target...),
					Counter: m.Counter, Gauge: m.Gauge, Untyped: m.Untyped, Histogram: m.Histogram, Summary: m.Summary}
				if g := m.GetGauge(); g != nil && (clockInstant(name) || clockAge(name)) {
					v := g.GetValue()
					switch {
					case clockInstant(name) && v > 0: // 0 is "never", not 1970
						v = r.onRuleClock(v)
					case clockAge(name):
						v *= r.speed()
					}
					c.Gauge = &dto.Gauge{Value: &v}
				}
				out.Metric = append(out.Metric, c)
			}
			replayed[i].families[name] = out
		}
	}
	store := stale(storeOf(replayed), replayed)
	return append(store, storage.NewListSeries(labels.FromStrings(labels.MetricName, "up", "job", "effectively", "instance", r.addr), up))
}

func ptr(s string) *string { return &s }

// stale adds Prometheus' staleness marker to every series at each scrape
// that lacks it after one that had it, so that a series that is gone stops
// being selected at once rather than after the 5-minute lookback.
func stale(store memStore, scrapes []scraped) memStore {
	out := make(memStore, 0, len(store))
	for _, s := range store {
		var samples []chunks.Sample
		have := map[int64]bool{}
		it := s.Iterator(nil)
		for it.Next() == chunkenc.ValFloat {
			ts, v := it.At()
			have[ts] = true
			samples = append(samples, fsample{t: ts, f: v})
		}
		for i := 1; i < len(scrapes); i++ {
			prev, cur := scrapes[i-1].at.UnixMilli(), scrapes[i].at.UnixMilli()
			if have[prev] && !have[cur] {
				samples = append(samples, fsample{t: cur, f: math.Float64frombits(value.StaleNaN)})
			}
		}
		sort.Slice(samples, func(i, j int) bool { return samples[i].T() < samples[j].T() })
		out = append(out, storage.NewListSeries(s.Labels(), samples))
	}
	return out
}

// firings is what fired at each scrape: alert → the firing series' labels.
type firings struct {
	at []map[string][]labels.Labels
}

// evaluate evaluates every rule at every scrape of the replayed recording
// and keeps the firing alerts: those whose expression returned the series
// at every evaluation of the rule's last "for" (Prometheus' rule manager
// makes an alert pending at its first evaluation and firing once it has
// been pending for "for"; an evaluation without the series resets it).
func evaluate(t *testing.T, rules []cutRule, rec *recording) firings {
	t.Helper()
	store := rec.store()
	engine := promqlengine.NewEngine(promqlengine.EngineOpts{MaxSamples: 1e7, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	f := firings{at: make([]map[string][]labels.Labels, len(rec.scrapes))}
	pendingSince := map[string]map[string]int{} // alert → series → first scrape of its unbroken run
	for _, r := range rules {
		pendingSince[r.alert] = map[string]int{}
	}
	for i := range rec.scrapes {
		f.at[i] = map[string][]labels.Labels{}
		for _, r := range rules {
			q, err := engine.NewInstantQuery(context.Background(), store, nil, r.expr, rec.ruleAt(i))
			require.NoError(t, err, r.alert)
			res := q.Exec(context.Background())
			require.NoError(t, res.Err, "%s at scrape %d", r.alert, i)
			vec, err := res.Vector()
			require.NoError(t, err, r.alert)
			q.Close()
			since := pendingSince[r.alert]
			returned := map[string]labels.Labels{}
			for _, s := range vec {
				lset := s.Metric.DropMetricName()
				returned[lset.String()] = lset
				if _, ok := since[lset.String()]; !ok {
					since[lset.String()] = i
				}
			}
			for key, from := range since {
				lset, ok := returned[key]
				switch {
				case !ok:
					delete(since, key)
				case rec.ruleAt(i).Sub(rec.ruleAt(from)) >= r.hold:
					f.at[i][r.alert] = append(f.at[i][r.alert], lset)
				}
			}
			if len(f.at[i][r.alert]) == 0 {
				delete(f.at[i], r.alert)
			}
		}
	}
	return f
}

// firingRun is one alert series firing without a break.
type firingRun struct {
	alert, series string
	from, to      int
}

// runs are the firing runs, by first scrape.
func (f firings) runs() []firingRun {
	var out []firingRun
	open := map[string]*firingRun{}
	for i, alerts := range append(f.at, nil) { // the nil closes the last runs
		now := map[string]bool{}
		for alert, series := range alerts {
			for _, lset := range series {
				key := alert + lset.String()
				now[key] = true
				if r, ok := open[key]; ok {
					r.to = i
				} else {
					open[key] = &firingRun{alert: alert, series: lset.String(), from: i, to: i}
				}
			}
		}
		for key, r := range open {
			if !now[key] {
				out = append(out, *r)
				delete(open, key)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].from != out[j].from {
			return out[i].from < out[j].from
		}
		return out[i].alert+out[i].series < out[j].alert+out[j].series
	})
	return out
}
