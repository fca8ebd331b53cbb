package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/proctest"
	"github.com/effectively-io/effectively/internal/status"
)

// stackInstance runs the stack script for an instance of the test's own
// (its ports in env), so stopping or restarting it disturbs no other test.
// It starts the service and stops it, removing its data, when the test ends.
func stackInstance(t *testing.T, service, dataDir string, env ...string) (stackCmd func(args ...string)) {
	t.Helper()
	stackDir := os.Getenv("EFFECTIVELY_STACK_DIR")
	if stackDir == "" {
		stackDir = "/var/tmp/effectively"
	}
	stackCmd = func(args ...string) {
		t.Helper()
		cmd := exec.Command("../stack/stack.sh", args...)
		cmd.Env = append(append(os.Environ(), "EFFECTIVELY_STACK_DIR="+stackDir), env...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "stack.sh %v: %s", args, out)
	}
	stackCmd("up", service)
	t.Cleanup(func() {
		stackCmd("down", service)
		_ = os.RemoveAll(filepath.Join(stackDir, dataDir))
	})
	return stackCmd
}

// ownPostgres starts a PostgreSQL instance of the test's own.
func ownPostgres(t *testing.T) (port string, stackCmd func(args ...string)) {
	t.Helper()
	port = strconv.Itoa(freePort(t))
	return port, stackInstance(t, "pg", "pg-"+port, "EFFECTIVELY_PG_PORT="+port)
}

func freePort(t *testing.T) int {
	t.Helper()
	return proctest.FreePort(t)
}

// dependencyUp is effectively_dependency_up{dependency=name} at addr.
func dependencyUp(t *testing.T, addr, name string) float64 {
	t.Helper()
	for _, m := range scrape(t, addr)["effectively_dependency_up"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "dependency" && l.GetValue() == name {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no effectively_dependency_up{dependency=%q} at %s", name, addr)
	return 0
}

// counter sums a counter family from a worker's /metrics.
func counter(t *testing.T, addr, name string) float64 {
	t.Helper()
	sum := 0.0
	for _, m := range scrape(t, addr)[name].GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

// scrape reads a worker's /metrics.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return mfs
}

// PostgreSQL stopped for 30 s while records keep arriving: the worker
// retries with backoff while its partitions are paused, dead-letters
// nothing, and afterwards every event has exactly one effect. Meanwhile
// the operator's tools stay true: /readyz turns 503 and names PostgreSQL,
// effectively_dependency_up{dependency="postgres"} falls to 0, `status`
// says PostgreSQL is unreachable and shows the partitions retrying with
// cause postgres_unavailable, and effectively_consumer_lag keeps rising
// though no batch commits; after the outage all of them recover.
func TestPostgresOutageLosesNothing(t *testing.T) {
	t.Parallel()
	port, stack := ownPostgres(t)
	base := fmt.Sprintf("postgres://effectively:effectively@127.0.0.1:%s/effectively?sslmode=disable", port)
	db := pgtest.NewOn(t, base, accounts.Migrations())
	topic := kafkatest.NewTopic(t, 4)
	group := kafkatest.NewGroup(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r := &rig{db: db, topic: topic, group: group, env: []string{
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(kafkatest.Brokers(t), ","),
		"EFFECTIVELY_KAFKA_GROUP=" + group, "EFFECTIVELY_KAFKA_TOPICS=" + topic,
		"EFFECTIVELY_POSTGRES_URL=" + db.URL, "EFFECTIVELY_HTTP_ADDR=" + httpAddr,
		"EFFECTIVELY_RETRY_MAX=2s", "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=100",
	}}
	first := workload.Config{Accounts: 300, Events: 6000, Duplicates: 0.1, OutOfOrder: 0.1, Seed: 21}
	exp := r.produce(t, first)
	w := r.worker(t)
	r.waitApplied(t, exp.Records, 2*time.Minute)
	// The standard collectors the dashboard reads (CPU, RSS) and the build.
	mfs := scrape(t, httpAddr)
	for _, name := range []string{"process_cpu_seconds_total", "process_resident_memory_bytes", "go_goroutines", "effectively_build_info", "effectively_parked_oldest_seconds"} {
		require.Contains(t, mfs, name)
	}
	build := map[string]string{}
	for _, l := range mfs["effectively_build_info"].GetMetric()[0].GetLabel() {
		build[l.GetName()] = l.GetValue()
	}
	require.Equal(t, "effectively", build["build"])
	require.NotEmpty(t, build["version"])
	require.True(t, strings.HasPrefix(build["go_version"], "go"), build["go_version"])

	stack("down", "pg")
	down := time.Now()
	lagBefore := gaugeSum(t, httpAddr, "effectively_consumer_lag")
	// Traffic keeps arriving during the outage (a second workload).
	second := workload.Config{Accounts: 300, Events: 4000, Duplicates: 0.1, OutOfOrder: 0.1, Seed: 22}
	exp2 := r.produce(t, second)
	var during string
	waitUntil(t, "/readyz reports the outage", 25*time.Second, func(context.Context) bool {
		code, body := readyz(t, httpAddr)
		during = body
		return code == http.StatusServiceUnavailable && strings.Contains(body, "postgres") && strings.Contains(body, "unreachable")
	})
	require.Zero(t, dependencyUp(t, httpAddr, "postgres"), "effectively_dependency_up says the database is down")
	require.Equal(t, 1.0, dependencyUp(t, httpAddr, "kafka"), "and only the database")
	// Nothing commits while the database is down, yet the lag rises to
	// cover the second workload: it is recomputed from the broker's end
	// offsets on a timer, not after a batch.
	var lagDuring float64
	waitUntil(t, "the lag gauge rises during the outage", 25*time.Second, func(context.Context) bool {
		lagDuring = gaugeSum(t, httpAddr, "effectively_consumer_lag")
		return lagDuring >= float64(exp2.Records)
	})
	var st status.Group
	waitUntil(t, "status shows the partitions retrying", 25*time.Second, func(context.Context) bool {
		st = r.status(t)
		return countStates(st, consumer.StateRetrying) > 0
	})
	t.Logf("status during the outage: postgres %q; partitions %+v", st.Postgres, st.Partitions)
	require.Contains(t, st.Postgres, "cannot reach PostgreSQL at 127.0.0.1:"+port, "status names the unreachable database")
	require.Contains(t, st.Postgres, "fix:")
	require.Equal(t, "ok", st.Kafka, "Kafka's side is still shown")
	require.Len(t, st.Partitions, 4)
	for _, p := range st.Partitions {
		require.NotNil(t, p.End, "end offsets come from Kafka")
		require.NotNil(t, p.Committed, "Kafka's commits are shown")
		if p.State == consumer.StateRetrying {
			require.Equal(t, consumer.CausePostgresUnavailable, p.Cause)
		}
	}
	require.Len(t, st.Members, 1)
	require.NotNil(t, st.Members[0].Worker, "the worker's own view: %s", st.Members[0].AdminError)
	require.NotEqual(t, "ok", st.Members[0].Worker.Postgres)
	require.Equal(t, float64(countStates(st, consumer.StateRetrying)), stateGauges(t, httpAddr, "retrying"))

	time.Sleep(30*time.Second - time.Since(down))
	stack("up", "pg")

	total := exp.Records + exp2.Records
	r.waitApplied(t, total, 3*time.Minute)
	waitUntil(t, "status recovers: postgres ok, every partition running, no lag", time.Minute, func(context.Context) bool {
		st = r.status(t)
		lag := int64(0)
		for _, p := range st.Partitions {
			if p.Lag != nil {
				lag += *p.Lag
			}
		}
		return st.Postgres == "ok" && countStates(st, consumer.StateRunning) == 4 && lag == 0
	})
	waitUntil(t, "the lag gauge falls to 0", 30*time.Second, func(context.Context) bool {
		return gaugeSum(t, httpAddr, "effectively_consumer_lag") == 0
	})
	require.Zero(t, stateGauges(t, httpAddr, "retrying"))
	waitUntil(t, "/readyz ready again", 30*time.Second, func(context.Context) bool {
		code, _ := readyz(t, httpAddr)
		return code == http.StatusOK
	})
	require.Equal(t, 1.0, dependencyUp(t, httpAddr, "postgres"))
	retries := counter(t, httpAddr, "effectively_batch_retries_total")
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	t.Logf("postgres down for 30 s; %v batch retries; lag %v before the second workload, %v during the outage; /readyz during the outage: %s",
		retries, lagBefore, lagDuring, during)
	require.Positive(t, retries, "the outage must have been felt: batches retried")
	require.Greater(t, lagDuring, lagBefore)
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM dead_letters`), "nothing dead-lettered for a transient cause")
	require.Equal(t, int64(exp.Distinct+exp2.Distinct), db.Count(t, `SELECT count(*) FROM effectively_claims`))
	require.Equal(t, int64(exp.ByType["ledger.credited"]+exp.ByType["ledger.debited"]+exp2.ByType["ledger.credited"]+exp2.ByType["ledger.debited"]),
		db.Count(t, `SELECT count(*) FROM ledger_entries`))
}

// status runs `effectively status --json` with the rig's environment.
func (r *rig) status(t *testing.T, args ...string) status.Group {
	t.Helper()
	code, out, stderr := runCmd(t, r.env, append([]string{"status", "--json"}, args...)...)
	require.Equal(t, 0, code, stderr)
	var st status.Group
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	return st
}

func countStates(st status.Group, state string) int {
	n := 0
	for _, p := range st.Partitions {
		if p.State == state {
			n++
		}
	}
	return n
}

// gaugeSum sums a gauge family from a worker's /metrics.
func gaugeSum(t *testing.T, addr, name string) float64 {
	t.Helper()
	sum := 0.0
	for _, m := range scrape(t, addr)[name].GetMetric() {
		sum += m.GetGauge().GetValue()
	}
	return sum
}

// stateGauges is how many partitions effectively_partition_state shows in
// state.
func stateGauges(t *testing.T, addr, state string) float64 {
	t.Helper()
	return labeledGaugeSum(t, addr, "effectively_partition_state", "state", state)
}

// labeledGaugeSum sums a gauge family's series whose label is value.
func labeledGaugeSum(t *testing.T, addr, name, label, value string) float64 {
	t.Helper()
	sum := 0.0
	for _, m := range scrape(t, addr)[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// ownKafka starts a Kafka broker of the test's own.
func ownKafka(t *testing.T) (brokers []string, stackCmd func(args ...string)) {
	t.Helper()
	ports := proctest.FreePorts(t, 2)
	port := strconv.Itoa(ports[0])
	stackCmd = stackInstance(t, "kafka", "kafka-"+port, "EFFECTIVELY_KAFKA_PORT="+port,
		"EFFECTIVELY_KAFKA_CONTROLLER_PORT="+strconv.Itoa(ports[1]), "EFFECTIVELY_KAFKA_HEAP=384m")
	return []string{"127.0.0.1:" + port}, stackCmd
}

// ownKafkaProxied starts a broker of the test's own with one listener per client, each reached through its own link of lab.
// Listener C<i> listens on a port of its own and advertises its link's
// address, so the broker's metadata sends client i back through link i for
// every connection it opens. admin is the plain listener, direct.
func ownKafkaProxied(t *testing.T, lab *netLab, clients int) (admin []string, perClient [][]string, links []*link, stackCmd func(args ...string)) {
	t.Helper()
	// The broker's, the controller's, and two per client: all distinct.
	ports := proctest.FreePorts(t, 2+2*clients)
	port := strconv.Itoa(ports[0])
	extra := make([]string, 0, clients)
	for i := range clients {
		listen := "127.0.0.1:" + strconv.Itoa(ports[2+2*i])
		k := lab.linkOn(t, fmt.Sprintf("kafka-%s-c%d", port, i), "127.0.0.1:"+strconv.Itoa(ports[3+2*i]), listen)
		_, advertised, _ := strings.Cut(k.Addr, ":")
		_, listenPort, _ := strings.Cut(listen, ":")
		extra = append(extra, fmt.Sprintf("C%d:%s:%s", i, listenPort, advertised))
		perClient = append(perClient, []string{k.Addr})
		links = append(links, k)
	}
	stackCmd = stackInstance(t, "kafka", "kafka-"+port, "EFFECTIVELY_KAFKA_PORT="+port,
		"EFFECTIVELY_KAFKA_CONTROLLER_PORT="+strconv.Itoa(ports[1]), "EFFECTIVELY_KAFKA_HEAP=384m",
		"EFFECTIVELY_KAFKA_EXTRA_LISTENERS="+strings.Join(extra, " "))
	return []string{"127.0.0.1:" + port}, perClient, links, stackCmd
}

// The broker restarted while the worker runs and records keep arriving:
// nothing is lost, nothing applied twice, nothing dead-lettered.
func TestBrokerRestartLosesNothing(t *testing.T) {
	t.Parallel()
	brokers, stack := ownKafka(t)
	db := pgtest.New(t, accounts.Migrations())
	topic, group := kafkatest.Name(t, "topic"), kafkatest.Name(t, "group")
	adm := kadmOn(t, brokers)
	resp, err := adm.CreateTopic(context.Background(), 4, 1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r := &rig{db: db, topic: topic, group: group, brokers: brokers, env: []string{
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"EFFECTIVELY_KAFKA_GROUP=" + group, "EFFECTIVELY_KAFKA_TOPICS=" + topic,
		"EFFECTIVELY_POSTGRES_URL=" + db.URL, "EFFECTIVELY_HTTP_ADDR=" + httpAddr,
		"EFFECTIVELY_RETRY_MAX=2s", "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=100",
	}}
	// Traffic in flight: about 8 s of records at 1,000/s, sent through the
	// restart (a record the restart failed is sent again; a duplicate is
	// harmless, which is the point).
	recs, exp := r.records(t, workload.Config{Accounts: 300, Events: 8000, Duplicates: 0.1, OutOfOrder: 0.1, Seed: 31})
	w := r.worker(t)
	produced := produceThroughRestarts(brokers, recs, 1000, 3*time.Minute)
	r.waitApplied(t, 1000, 2*time.Minute)
	stack("down", "kafka")
	time.Sleep(5 * time.Second)
	stack("up", "kafka")
	require.NoError(t, <-produced)
	r.waitApplied(t, exp.Records, 3*time.Minute)
	commitFailures := counter(t, httpAddr, "effectively_kafka_commit_failures_total")
	connectErrors := counter(t, httpAddr, "effectively_kafka_connect_errors_total")
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	t.Logf("broker down for 5 s: %v Kafka commits failed, %v connection attempts failed", commitFailures, connectErrors)
	require.Positive(t, connectErrors, "the restart must have been felt: the client failed to reconnect at least once")
	// Every event exactly one effect, every account and balance as the
	// events alone say, no dead letters.
	r.verify(t, exp)
}

func kadmOn(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}
