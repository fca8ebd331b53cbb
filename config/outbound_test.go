package config

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOutboundDefaults(t *testing.T) {
	t.Parallel()

	c := testDefault()
	require.Equal(t, 10000, c.Outbox.MaxAttempts)
	require.Equal(t, 72*time.Hour, c.Outbox.MaxAge)
	require.Equal(t, 10, c.Prefetch.MaxAttempts)
}

func TestOutboundKeysLoad(t *testing.T) {
	t.Setenv("EFFECTIVELY_OUTBOX_MAX_AGE", "6h")
	path := writeConfig(t, `
outbox:
  max_attempts: 50
prefetch:
  max_attempts: 3
`)
	c, err := Load(path, nil, testExt)
	require.NoError(t, err)
	require.Equal(t, 50, c.Outbox.MaxAttempts)
	require.Equal(t, 6*time.Hour, c.Outbox.MaxAge)
	require.Equal(t, 3, c.Prefetch.MaxAttempts)
}

func TestOutboundValidate(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		mutate func(c *Config)
		key    string
		want   string
	}{
		{"outbox attempts", func(c *Config) { c.Outbox.MaxAttempts = 0 }, "outbox.max_attempts", "EFFECTIVELY_OUTBOX_MAX_ATTEMPTS"},
		{"outbox age", func(c *Config) { c.Outbox.MaxAge = -time.Second }, "outbox.max_age", "EFFECTIVELY_OUTBOX_MAX_AGE"},
		{"prefetch attempts", func(c *Config) { c.Prefetch.MaxAttempts = -1 }, "prefetch.max_attempts", "EFFECTIVELY_PREFETCH_MAX_ATTEMPTS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := testDefault()
			tt.mutate(&c)
			err := c.Validate()
			var fe *FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			require.Equal(t, tt.key, fe.Key)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

// redact.params and a target's secret_path_prefix become the policy the
// worker redacts with, and `config` prints with it.
func TestRedactPolicy(t *testing.T) {
	t.Setenv("EFFECTIVELY_REDACT_PARAMS", "x_session,Signed-Hash")
	t.Setenv("EFFECTIVELY_TARGETS_WAREHOUSE_URL", "https://chat.example.com/hooks/K3yInPath?x_session=S1&signed_hash=H1&page=2")
	t.Setenv("EFFECTIVELY_TARGETS_WAREHOUSE_SECRET_PATH_PREFIX", "/hooks/")
	ext := Extension{Targets: []string{"warehouse"}, Defaults: testExt.Defaults}
	c, err := Load("", nil, ext)
	require.NoError(t, err)
	require.Equal(t, []string{"x_session", "Signed-Hash"}, c.Redact.Params)
	p := c.RedactPolicy()
	require.Equal(t, "https://chat.example.com/hooks/xxxxx?x_session=xxxxx&signed_hash=xxxxx&page=2", p.URL(c.Targets["warehouse"].URL))
	require.Equal(t, "https://other.example.com/hooks/kept", p.URL("https://other.example.com/hooks/kept"), "the prefix is the target's host's")
	out, err := c.Dump()
	require.NoError(t, err)
	for _, s := range []string{"K3yInPath", "S1", "H1"} {
		require.NotContains(t, string(out), s)
	}

	for _, bad := range []string{"hooks/", "/hooks/?x=1"} {
		c := DefaultsOf(ext)
		c.Targets = map[string]Target{"warehouse": {URL: "https://chat.example.com/", SecretPathPrefix: bad}}
		err := c.Validate()
		require.ErrorContains(t, err, "targets.warehouse.secret_path_prefix")
		require.ErrorContains(t, err, "EFFECTIVELY_TARGETS_WAREHOUSE_SECRET_PATH_PREFIX")
	}
	c = testDefault()
	c.Redact.Params = []string{"ok", "not=a name"}
	require.ErrorContains(t, c.Validate(), "redact.params")
}
