package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The console is off by default; on, it needs the admin server and a token
// file, or a loopback address that explicitly allows none.
func TestValidateConsole(t *testing.T) {
	t.Parallel()
	c := testDefault()
	require.False(t, c.Console.Enabled)
	require.NoError(t, c.Validate())

	keyOf := func(c Config) []string {
		var keys []string
		for _, fe := range fieldErrors(t, c.Validate()) {
			keys = append(keys, fe.Key)
		}
		return keys
	}
	c.Console.Enabled = true
	require.Equal(t, []string{"console.token_file"}, keyOf(c), "no token")
	c.Console.LocalhostWithoutToken = true
	require.NoError(t, c.Validate(), "127.0.0.1 without a token, allowed")
	c.HTTP.Addr = "0.0.0.0:9090"
	require.Equal(t, []string{"console.localhost_without_token"}, keyOf(c), "no token on every interface")
	c.Console.TokenFile = "/run/secrets/console-tokens"
	require.NoError(t, c.Validate())
	c.HTTP.Addr = ""
	require.Equal(t, []string{"console.enabled"}, keyOf(c), "no admin server")
	c.HTTP.Addr = "[::1]:9410"
	c.Console.HistoryInterval = 0
	require.Equal(t, []string{"console.history_interval"}, keyOf(c))

	c = testDefault()
	c.Console.AllowedHosts = []string{"console.example.com", "localhost:8080", "[::1]:9410", "10.0.0.5"}
	require.NoError(t, c.Validate())
	for _, bad := range []string{"https://console.example.com", "console.example.com/", "console.example.com.", "*.example.com", "::1", "host:0", "host:65536", "a..b", "user@host", ""} {
		c.Console.AllowedHosts = []string{"localhost", bad}
		fes := fieldErrors(t, c.Validate())
		require.Len(t, fes, 1, bad)
		require.Equal(t, "console.allowed_hosts", fes[0].Key, bad)
		require.Contains(t, fes[0].Fix, "EFFECTIVELY_CONSOLE_ALLOWED_HOSTS", bad)
	}

	for addr, want := range map[string]bool{"127.0.0.1:1": true, "127.9.9.9:1": true, "[::1]:1": true, "localhost:1": true, "0.0.0.0:1": false, ":1": false, "10.0.0.1:1": false, "nonsense": false} {
		require.Equal(t, want, IsLoopback(addr), addr)
	}
}
