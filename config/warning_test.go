package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// SASL without TLS is accepted, and warned about for every mechanism that
// puts something on the wire: PLAIN's password, OAUTHBEARER's token,
// SCRAM's exchange and session.
func TestConfigWarningsSASLWithoutTLS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mechanism string
		tls       bool
		want      []string // substrings of the one warning; nil: no warning
	}{
		{SASLMechanismNone, false, nil},
		{SASLMechanismPlain, true, nil},
		{SASLMechanismScramSHA512, true, nil},
		{SASLMechanismOAuthBearer, true, nil},
		{SASLMechanismPlain, false, []string{"plain without kafka.tls.enabled", "password to the brokers in clear text", "User:worker"}},
		{"PLAIN", false, []string{"plain without kafka.tls.enabled"}},
		{SASLMechanismScramSHA256, false, []string{"scram-sha-256 without kafka.tls.enabled", "guess a weak password offline", "read and altered"}},
		{"SCRAM-SHA-512", false, []string{"scram-sha-512 without kafka.tls.enabled"}},
		{SASLMechanismOAuthBearer, false, []string{"oauthbearer without kafka.tls.enabled", "token in clear text", "replay"}},
	}
	for _, tt := range tests {
		c := testDefault()
		c.Kafka.Brokers = []string{"kafka-1.example.com:9092"}
		c.Kafka.TLS.Enabled = tt.tls
		c.Kafka.SASL = KafkaSASL{Mechanism: tt.mechanism, Username: "worker", Password: "hunter2"}
		ws := c.Warnings()
		if tt.want == nil {
			require.Empty(t, ws, "%s tls=%t", tt.mechanism, tt.tls)
			continue
		}
		require.Len(t, ws, 1, "%s tls=%t", tt.mechanism, tt.tls)
		w := ws[0]
		require.Equal(t, "kafka.sasl.mechanism", w.Setting)
		for _, s := range tt.want {
			require.Contains(t, w.String(), s)
		}
		require.Contains(t, w.Problem, "kafka-1.example.com:9092", "names where the credentials go")
		require.Contains(t, w.Fix, "EFFECTIVELY_KAFKA_TLS_ENABLED")
		require.NotContains(t, w.String(), "hunter2")
	}
}

func TestEnvWarnings(t *testing.T) {
	t.Parallel()
	ext := Extension{Targets: []string{"erp"}, Aliases: map[string]string{"effects.erp.url": "targets.erp.url"}}
	warned := func(environ ...string) map[string]Warning {
		out := map[string]Warning{}
		for _, w := range EnvWarnings(environ, ext) {
			out[w.Setting] = w
		}
		return out
	}

	// The case: a typo of a key's variable, suggested by edit
	// distance; its value (a URL with a password) is never repeated.
	ws := warned("EFFECTIVELY_POSTGRES_ULR=postgres://u:s3cret@db/x", "EFFECTIVELY_KAFKA_BROKER=k:9092",
		"EFFECTIVELY_TARGETS_ERPP_URL=https://erp", "EFFECTIVELY_COMPLETELY_DIFFERENT_THING=1")
	require.Len(t, ws, 4)
	require.Equal(t, "did you mean EFFECTIVELY_POSTGRES_URL (postgres.url)? rename it, or unset it", ws["EFFECTIVELY_POSTGRES_ULR"].Fix)
	require.Contains(t, ws["EFFECTIVELY_POSTGRES_ULR"].Problem, "ignored")
	require.Contains(t, ws["EFFECTIVELY_KAFKA_BROKER"].Fix, "EFFECTIVELY_KAFKA_BROKERS (kafka.brokers)")
	require.Contains(t, ws["EFFECTIVELY_TARGETS_ERPP_URL"].Fix, "EFFECTIVELY_TARGETS_ERP_URL (targets.erp.url)")
	require.Contains(t, ws["EFFECTIVELY_TARGETS_ERPP_URL"].Fix, "this build's targets are erp")
	require.Equal(t, "unset it; docs/reference/config.md lists every key's variable", ws["EFFECTIVELY_COMPLETELY_DIFFERENT_THING"].Fix)
	for _, w := range ws {
		require.NotContains(t, w.String(), "s3cret")
	}

	// Case matters in variable names; file-only keys have no variable.
	ws = warned("effectively_kafka_brokers=k:9092", "Effectively_Log_Level=debug", "EFFECTIVELY_TOPICS=orders", "EFFECTIVELY_SINKS=x")
	require.Len(t, ws, 4)
	require.Equal(t, "rename it EFFECTIVELY_KAFKA_BROKERS (kafka.brokers)", ws["effectively_kafka_brokers"].Fix)
	require.Contains(t, ws["effectively_kafka_brokers"].Problem, "case-sensitive")
	require.Equal(t, "rename it EFFECTIVELY_LOG_LEVEL (log.level)", ws["Effectively_Log_Level"].Fix)
	require.Contains(t, ws["EFFECTIVELY_TOPICS"].Problem, "only the config file sets")
	require.Contains(t, ws["EFFECTIVELY_SINKS"].Fix, "sinks: list")

	// Not reported: every key's variable, the build's targets and older
	// names, the tools' variables, Kubernetes' service links, and names
	// without the prefix.
	var quiet []string
	for _, l := range leaves {
		quiet = append(quiet, EnvName(l.key)+"=x")
	}
	quiet = append(quiet, "EFFECTIVELY_TARGETS_ERP_URL=x", "EFFECTIVELY_TARGETS_ERP_BEARER_TOKEN_FILE=x", "EFFECTIVELY_EFFECTS_ERP_URL=x")
	for _, n := range nonConfigEnv {
		quiet = append(quiet, n+"=1")
	}
	quiet = append(quiet, "EFFECTIVELY_TEST_POSTGRES_URL=x", "EFFECTIVELY_TEST_ANYTHING_NEW=x", "EFFECTIVELY_CHAOS_SEED=1", "EFFECTIVELY_BENCH_MEMBERSHIP=1",
		"EFFECTIVELY_SERVICE_HOST=10.0.0.1", "EFFECTIVELY_SERVICE_PORT=9410", "EFFECTIVELY_SERVICE_PORT_ADMIN=9410",
		"EFFECTIVELY_PORT=tcp://10.0.0.1:9410", "EFFECTIVELY_PORT_9410_TCP=tcp://10.0.0.1:9410",
		"EFFECTIVELY_PORT_9410_TCP_ADDR=10.0.0.1", "EFFECTIVELY_PORT_9410_TCP_PORT=9410", "EFFECTIVELY_PORT_9410_TCP_PROTO=tcp",
		"EFFECTIVELY_CONSOLE_SERVICE_HOST=10.0.0.2", "EFFECTIVELY_CONSOLE_PORT=tcp://10.0.0.2:80",
		"PATH=/bin", "HOME=/root", "XEFFECTIVELY_POSTGRES_ULR=x", "NOEQUALS")
	require.Empty(t, EnvWarnings(quiet, ext))

	// A service link's bare _PORT holds a URL; a guess at a port key does not.
	ws = warned("EFFECTIVELY_HTTP_PORT=9410")
	require.Contains(t, ws, "EFFECTIVELY_HTTP_PORT")
	// Without the build's extension its target variables are unknown.
	require.Len(t, EnvWarnings([]string{"EFFECTIVELY_TARGETS_ERP_URL=x"}), 1)
}

// Every EFFECTIVELY_ variable the repository's scripts, tests, charts and
// docs use is a configuration key's or on the list of the tools' own, so
// that none of them makes a command warn: a new knob of a suite or of the
// stack must be added to nonConfigEnv (or to a prefix family).
func TestEnvWarningsKnowTheRepositorysVariables(t *testing.T) {
	t.Parallel()
	// Build-specific keys (targets, the reference build's older names) are
	// checked with the build (cmd/effectively), and these names are typos
	// on purpose, in the tests and docs of this check.
	skip := regexp.MustCompile(`^EFFECTIVELY_(TARGETS|EFFECTS|SOURCES)_|^EFFECTIVELY_$`)
	deliberate := []string{"EFFECTIVELY_POSTGRES_ULR", "EFFECTIVELY_KAFKA_BROKER", "EFFECTIVELY_TARGETS_ERPP_URL",
		"EFFECTIVELY_COMPLETELY_DIFFERENT_THING", "EFFECTIVELY_TOPICS", "EFFECTIVELY_SINKS", "EFFECTIVELY_HTTP_PORT",
		"EFFECTIVELY_PORT", "EFFECTIVELY_CONSOLE_PORT", "EFFECTIVELY_KAFKA_SASL_MECHNISM"}
	name := regexp.MustCompile(`EFFECTIVELY_[A-Z0-9_]*`)
	found := map[string]string{}
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".git" || n == "node_modules" || n == "bin" || n == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".sh", ".md", ".yaml", ".yml", ".tpl", ".json", ".txt":
		default:
			if b := filepath.Base(path); b != "Makefile" && b != "Dockerfile" {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range name.FindAllString(string(b), -1) {
			if _, ok := found[n]; !ok {
				found[n] = path
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, len(found), 50, "the walk found the repository's variables")
	for n, path := range found {
		if skip.MatchString(n) || slices.Contains(deliberate, n) || strings.HasSuffix(n, "_") {
			continue
		}
		require.Empty(t, EnvWarnings([]string{n + "=1"}), "%s (first in %s) would be warned about: add it to nonConfigEnv if a tool reads it", n, path)
	}
}
