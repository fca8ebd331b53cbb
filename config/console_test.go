package config

import (
	"strings"
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

// ParseHostPort normalises what may be compared (case, IP spellings,
// leading zeros of a port) and refuses every other spelling of a host.
func TestParseHostPort(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]HostPort{
		"localhost":                    {Host: "localhost"},
		"LocalHost:9410":               {Host: "localhost", Port: "9410"},
		"localhost:09410":              {Host: "localhost", Port: "9410"},
		"127.0.0.1:1":                  {Host: "127.0.0.1", Port: "1"},
		"[::1]:9410":                   {Host: "::1", Port: "9410"},
		"[0:0:0:0:0:0:0:1]":            {Host: "::1"},
		"[::FFFF:127.0.0.1]:1":         {Host: "::ffff:127.0.0.1", Port: "1"},
		"console.example.com:65535":    {Host: "console.example.com", Port: "65535"},
		"my_host.internal":             {Host: "my_host.internal"},
		"xn--bcher-kva.example:80":     {Host: "xn--bcher-kva.example", Port: "80"},
		"effectively-0.effectively.ns": {Host: "effectively-0.effectively.ns"},
	} {
		got, err := ParseHostPort(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", ":9410", "localhost:", "localhost.", "localhost.:9410", "local..host", ".localhost", "localhost:0",
		"localhost:70000", "localhost:+1", "localhost:1x", "localhost:9410.evil.example", "::1", "[::1", "[::1]x", "[::1]:", "[127.0.0.1]",
		"[fe80::1%25eth0]:1", "user@localhost", "localhost/path", "http://localhost", `localhost\evil`, "-host", "host-", "bücher.example",
		"local host", "localhost\x00", "*.example.com", strings.Repeat("a", 64) + ".example", strings.Repeat("a.", 127) + "aa"} {
		_, err := ParseHostPort(in)
		require.Error(t, err, "%q", in)
	}
}
