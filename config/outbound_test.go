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
