package service

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
)

// Off (the default), the worker builds no console: no handler for the admin
// server to mount, no history to sample.
func TestConsoleOffBuildsNothing(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	require.False(t, cfg.Console.Enabled)
	h, history, err := New("x").newConsole(cfg, zap.NewNop(), nil, prometheus.NewRegistry())
	require.NoError(t, err)
	require.Nil(t, h)
	require.Nil(t, history)
}
