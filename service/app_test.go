package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/status"
)

// testApp is a small build: one handler, two targets, an older key kept,
// a default topic and a command of its own.
func testApp() *App {
	app := New("orders")
	app.Version = "v1.2.3"
	app.HandleFunc("order.placed", func(context.Context, *handlers.Effects, event.Event) error { return nil })
	app.Target("warehouse", handlers.Idempotent)
	app.Target("notify", handlers.RecordedIntent)
	app.Alias("effects.warehouse.url", "targets.warehouse.url")
	app.Defaults(func(c *config.Config) { c.Kafka.Topics = []string{"orders"} })
	app.Command(func(c *CLI) *cobra.Command {
		return &cobra.Command{Use: "hello", RunE: func(*cobra.Command, []string) error {
			_, err := c.Stdout().Write([]byte("hello from " + c.Config().Kafka.Topics[0] + "\n"))
			return err
		}}
	})
	return app
}

func run(t *testing.T, app *App, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = app.Run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// The build's targets, older keys and defaults reach the configuration;
// the engine's keys are all there too.
func TestAppConfiguration(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "effects:\n  warehouse:\n    url: https://user:s3cret@wh.example/\ntargets:\n  notify:\n    url: https://notify.example/\n")
	out, _, err := run(t, testApp(), "config", "--config", path)
	require.NoError(t, err)
	require.Contains(t, out, "warehouse:\n    url: https://user:xxxxx@wh.example/", "the older key sets the target; its password is redacted")
	require.Contains(t, out, "notify:\n    url: https://notify.example/")
	require.Contains(t, out, "  topics:\n    - orders", "the build's default topic")
	require.Contains(t, out, "  group: orders\n", "a build is its own consumer group by default")
	require.NotContains(t, out, "s3cret")

	_, _, err = run(t, testApp(), "config", "--config", writeFile(t, "targets:\n  warehouse:\n    url: https://a/\n  billing:\n    url: https://b/\n"))
	require.Error(t, err)
	require.Equal(t, 2, ExitCode(err))
	require.Contains(t, err.Error(), "targets.billing")
	require.Contains(t, err.Error(), "this build's targets are notify, warehouse")
}

// The wiring resolves declared targets against the configuration.
func TestAppEnvResolvesTargets(t *testing.T) {
	t.Parallel()
	app := testApp()
	cfg := config.DefaultsOf(app.extension())
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("tok-1"), 0o600))
	cfg.Targets = map[string]config.Target{"warehouse": {URL: "https://wh.example/", BearerTokenFile: token, HeaderFiles: []string{"X-Api-Key=" + token}}}
	env := app.env(cfg)
	wh := env.Targets["warehouse"]
	require.Equal(t, "https://wh.example/", wh.URL)
	require.True(t, wh.Idempotent)
	// A prefetcher's request carries the target's credentials, as the
	// outbox's calls do.
	req, err := wh.NewRequest(t.Context(), http.MethodGet, "stock/1", nil)
	require.NoError(t, err)
	require.Equal(t, "https://wh.example/stock/1", req.URL.String())
	require.Equal(t, "Bearer tok-1", req.Header.Get("Authorization"))
	require.Equal(t, "tok-1", req.Header.Get("X-Api-Key"))
	_, err = env.Target("notify")
	require.ErrorIs(t, err, handlers.ErrTargetOff)
	_, err = env.Target("billing")
	require.Error(t, err)
	require.NotErrorIs(t, err, handlers.ErrTargetOff)
}

// Every build has the whole command line, plus its own commands; usage
// errors exit 2.
func TestAppCommands(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, testApp(), "--help")
	require.NoError(t, err)
	for _, c := range []string{"run", "migrate", "replay", "dlq", "parked", "outbox", "audit", "prune", "produce", "config", "version", "hello"} {
		require.Contains(t, out, "\n  "+c+" ", "the build has %s", c)
	}
	require.Contains(t, out, "orders [command]", "usage names the build")

	out, _, err = run(t, testApp(), "version")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "orders v1.2.3 "), out)

	out, _, err = run(t, testApp(), "hello")
	require.NoError(t, err)
	require.Equal(t, "hello from orders\n", out)

	_, _, err = run(t, testApp(), "produce", "--events", "10")
	require.Error(t, err, "without a workload generator, produce has no --events")
	require.Equal(t, 2, ExitCode(err))

	_, _, err = run(t, testApp(), "run", "--no-such-flag")
	require.Equal(t, 2, ExitCode(err))
}

// Exit codes: 0 ok, 1 a runtime failure, 2 usage (cobra's own errors too),
// 3 a check that found a problem.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"no-such-command"},
		{"run", "extra-argument"},
		{"dlq", "show"},
		{"dlq", "show", "1", "2"},
		{"status", "--watch", "-1s"},
		{"version", "--no-such-flag"},
	} {
		_, _, err := run(t, testApp(), args...)
		require.Error(t, err, "%v", args)
		require.Equal(t, ExitUsage, ExitCode(err), "%v: %v", args, err)
	}
	require.Equal(t, ExitOK, ExitCode(nil))
	require.Equal(t, ExitFailure, ExitCode(errors.New("cannot reach PostgreSQL")))
	require.Equal(t, ExitCheckFailed, ExitCode(fmt.Errorf("auditing: %w", CheckFailed(errors.New("2 records unaccounted")))))
	require.Equal(t, ExitUsage, ExitCode(UsageError(errors.New("--expect is required"))))

	// A runtime failure: nothing listens at the database's address.
	_, _, err := run(t, testApp(), "dlq", "list", "--postgres-url", "postgres://u:p@127.0.0.1:1/db?connect_timeout=2")
	require.Error(t, err)
	require.Equal(t, ExitFailure, ExitCode(err), "%v", err)

	// Deleting a topic is asked for; without a terminal it needs --yes, and
	// nothing is contacted before that.
	_, _, err = run(t, testApp(), "produce", "--recreate", "--kafka-brokers", "127.0.0.1:1")
	require.Error(t, err)
	require.Equal(t, 2, ExitCode(err))
	require.Contains(t, err.Error(), "delete topic orders and every record in it; confirm with --yes")
}

// status reads Kafka and PostgreSQL on their own: when neither answers, it
// still prints what it has, names both addresses and fixes, and exits 1.
func TestStatusWithNothingReachable(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, testApp(), "status", "--json", "--kafka-brokers", "127.0.0.1:1",
		"--postgres-url", "postgres://u:p@127.0.0.1:1/db?connect_timeout=2")
	require.Error(t, err)
	require.Equal(t, ExitFailure, ExitCode(err))
	var st status.Group
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Contains(t, st.Kafka, "127.0.0.1:1 (kafka.brokers)")
	require.Contains(t, st.Kafka, "fix:")
	require.Contains(t, st.Postgres, "cannot reach PostgreSQL at 127.0.0.1:1")
	require.Contains(t, st.Postgres, "fix:")
	require.NotContains(t, out, "u:p@", "no password in the output")
	require.Empty(t, st.Members)
	require.Nil(t, st.DeadLetters)
}

// Every command that loads the configuration warns, once, about what is
// valid but probably unmeant or unsafe, and still runs: a misspelt
// variable (its value never shown), SASL without TLS. When the
// configuration does not load, the misspelt variable is shown beside the
// error it probably explains.
func TestCommandsWarnAboutConfiguration(t *testing.T) {
	t.Setenv("EFFECTIVELY_POSTGRES_ULR", "postgres://u:s3cret@db.example.com/x")
	t.Setenv("EFFECTIVELY_TEST_POSTGRES_URL", "postgres://harness") // the test harness's own: not warned about
	t.Setenv("EFFECTIVELY_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
	t.Setenv("EFFECTIVELY_KAFKA_SASL_USERNAME", "worker")
	t.Setenv("EFFECTIVELY_KAFKA_SASL_PASSWORD", "hunter2")
	out, stderr, err := run(t, testApp(), "config")
	require.NoError(t, err, "a warning does not stop the command")
	require.Contains(t, out, "mechanism: scram-sha-512", "Kafka's spelling loads as the constant")
	require.Equal(t, 1, strings.Count(stderr, "EFFECTIVELY_POSTGRES_ULR is set, but it is not the environment variable of any configuration key"), stderr)
	require.Contains(t, stderr, `"fix":"did you mean EFFECTIVELY_POSTGRES_URL (postgres.url)? rename it, or unset it"`)
	require.Equal(t, 1, strings.Count(stderr, "kafka.sasl.mechanism scram-sha-512 without kafka.tls.enabled"), stderr)
	require.Contains(t, stderr, `"level":"warn"`)
	require.NotContains(t, stderr, "TEST_POSTGRES_URL")
	require.NotContains(t, stderr, "s3cret")
	require.NotContains(t, stderr, "hunter2")

	t.Setenv("EFFECTIVELY_KAFKA_SASL_MECHANISM", "")
	t.Setenv("EFFECTIVELY_KAFKA_SASL_MECHNISM", "scram-sha-512")
	_, stderr, err = run(t, testApp(), "config")
	require.Error(t, err)
	require.Equal(t, ExitUsage, ExitCode(err))
	require.Contains(t, stderr, "warning: config: EFFECTIVELY_KAFKA_SASL_MECHNISM: is set, but it is not")
	require.Contains(t, stderr, "did you mean EFFECTIVELY_KAFKA_SASL_MECHANISM (kafka.sasl.mechanism)?")
}
