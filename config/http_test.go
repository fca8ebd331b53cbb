package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Profiles are served only when asked for: they are unauthenticated.
func TestLoadHTTPPprof(t *testing.T) {
	c, err := Load("", nil, testExt)
	require.NoError(t, err)
	require.False(t, c.HTTP.Pprof, "http.pprof must default to off")

	t.Setenv("EFFECTIVELY_HTTP_PPROF", "true")
	c, err = Load("", nil, testExt)
	require.NoError(t, err)
	require.True(t, c.HTTP.Pprof)
}
