package httphost

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Parse normalises what may be compared (case, IP spellings,
// leading zeros of a port) and refuses every other spelling of a host.
func TestParse(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Host{
		"localhost":                    {Name: "localhost"},
		"LocalHost:9410":               {Name: "localhost", Port: "9410"},
		"localhost:09410":              {Name: "localhost", Port: "9410"},
		"127.0.0.1:1":                  {Name: "127.0.0.1", Port: "1"},
		"[::1]:9410":                   {Name: "::1", Port: "9410"},
		"[0:0:0:0:0:0:0:1]":            {Name: "::1"},
		"[::FFFF:127.0.0.1]:1":         {Name: "::ffff:127.0.0.1", Port: "1"},
		"console.example.com:65535":    {Name: "console.example.com", Port: "65535"},
		"my_host.internal":             {Name: "my_host.internal"},
		"xn--bcher-kva.example:80":     {Name: "xn--bcher-kva.example", Port: "80"},
		"effectively-0.effectively.ns": {Name: "effectively-0.effectively.ns"},
	} {
		got, err := Parse(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", ":9410", "localhost:", "localhost.", "localhost.:9410", "local..host", ".localhost", "localhost:0",
		"localhost:70000", "localhost:+1", "localhost:1x", "localhost:9410.evil.example", "::1", "[::1", "[::1]x", "[::1]:", "[127.0.0.1]",
		"[fe80::1%25eth0]:1", "user@localhost", "localhost/path", "http://localhost", `localhost\evil`, "-host", "host-", "bücher.example",
		"local host", "localhost\x00", "*.example.com", strings.Repeat("a", 64) + ".example", strings.Repeat("a.", 127) + "aa"} {
		_, err := Parse(in)
		require.Error(t, err, "%q", in)
	}
}
