package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/crashpoint"
	"github.com/effectively-io/effectively/internal/proctest"
)

// A program that embeds the worker (examples/embedded: service.NewWorker
// beside its own HTTP server, with its own zap logger and Prometheus
// registry), SIGKILLed over and over while it applies a workload with
// duplicates and disorder: every event has exactly one effect, no stored
// position moves backwards, and the program's server carries both its own
// routes and metrics and the worker's.
func TestEmbeddedWorkerUnderKills(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "embedded")
	// With the crash-point hook, as the suite's own binary: the program
	// kills itself between its PostgreSQL and Kafka commits, and the like.
	build := exec.Command("go", "build", "-tags", "crashpoint", "-o", bin, "../examples/embedded")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building examples/embedded: %s", out)

	r := newRig(t, 4, "EFFECTIVELY_KAFKA_INSTANCE_ID=embedded", "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=40")
	exp := r.produce(t, testWorkload(12000, 400, 21))
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := append(append([]string{}, r.env...), "EMBEDDED_ADDR="+addr)
	startProgram := func(extra ...string) *proctest.Proc {
		p := proctest.Start(t, bin, append(append([]string{}, env...), extra...))
		waitUntil(t, "the embedded worker started", time.Minute, func(context.Context) bool {
			return strings.Contains(p.Stderr.String(), "worker started") || p.Exited()
		})
		// A crash point may fire before this poll sees the start (the
		// first batch can be that quick); any other exit is a failure.
		crashed := strings.Contains(p.Stderr.String(), "crashpoint: killing the process at ")
		require.False(t, p.Exited() && !crashed, "the program exited: %s", tail(p.Stderr.String(), 2000))
		return p
	}

	stopWatch := r.watchPositions(t)
	rng := rand.New(rand.NewPCG(5, 8))
	points := []string{crashpoint.BeforeDBCommit, crashpoint.AfterDBCommit, crashpoint.AfterKafkaCommit}
	kills := map[string]int{}
	deadline := time.Now().Add(4 * time.Minute) // hang guard
	done := func() bool { return r.applied(t) >= int64(exp.Records) }
	for n := 0; n < 9 && !done(); n++ {
		if n%3 == 2 {
			// A SIGKILL from outside, at no particular point.
			p := startProgram()
			time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
			p.Signal(t, syscall.SIGKILL)
			p.Wait(t, time.Minute)
			kills["random"]++
			continue
		}
		point := points[rng.IntN(len(points))]
		p := startProgram(fmt.Sprintf("%s=%s:%d", crashpoint.EnvVar, point, 1+rng.IntN(6)))
		if untilCrashOrDone(t, &proc{Proc: p, cmd: p.Cmd, stdout: &p.Stdout, stderr: &p.Stderr}, point, deadline, done) {
			kills[point]++
		}
	}
	p := startProgram()
	r.waitApplied(t, exp.Records, 3*time.Minute)

	// One server: the program's route and metric, the worker's routes and
	// metrics, in the program's registry.
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := get("/hello")
	require.Equal(t, http.StatusOK, code, body)
	// Ready once the last start has joined the group. The workload may have
	// been applied before it (by the members killed above): the rejoin of
	// the static member, under load, can end after waitApplied returns.
	// The readiness must come, within a hang guard.
	lastReady := ""
	t.Cleanup(func() {
		if t.Failed() && lastReady != "" {
			t.Logf("the last /readyz answer: %s", lastReady)
		}
	})
	waitUntil(t, "/readyz answering 200 (the restarted member joined)", 2*time.Minute, func(context.Context) bool {
		code, lastReady = get("/readyz")
		return code == http.StatusOK
	})
	code, body = get("/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, m := range []string{"embedded_hello_requests_total 1", "effectively_events_total", "effectively_kafka_", "go_goroutines"} {
		require.Contains(t, body, m)
	}
	code, body = get("/status")
	require.Equal(t, http.StatusOK, code)
	var status struct {
		Partitions []json.RawMessage `json:"partitions"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &status), body)
	require.NotEmpty(t, status.Partitions, body)

	// The program's logger: its own field on the worker's lines, JSON.
	require.Contains(t, p.Stderr.String(), `"program":"embedded"`)
	require.Contains(t, p.Stderr.String(), `"logger":"worker`)

	p.Signal(t, syscall.SIGTERM)
	require.Equal(t, 0, p.Wait(t, time.Minute), "a SIGTERMed program drains and exits 0: %s", tail(p.Stderr.String(), 2000))
	total := 0
	for _, k := range kills {
		total += k
	}
	t.Logf("%d SIGKILLs %v, %d position samples", total, kills, stopWatch())
	require.GreaterOrEqual(t, total, 5, "the program must actually be killed")
	r.verify(t, exp)
}
