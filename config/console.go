package config

import (
	"fmt"
	"net"
	"time"

	"github.com/effectively-io/effectively/internal/httphost"
)

// validateConsole checks the console's keys: it needs the admin server, and
// a token file unless it may run without one on a loopback address.
func (c Config) validateConsole(v *validator) {
	cs := c.Console
	v.durationBetween("console.history_interval", cs.HistoryInterval, time.Second, 5*time.Minute, "")
	for _, h := range cs.AllowedHosts {
		if _, err := httphost.Parse(h); err != nil {
			v.add("console.allowed_hosts", h, "an entry "+err.Error(),
				fmt.Sprintf("write each entry (%s, comma-separated) as a host name or IP address, or host:port to allow that port only, e.g. console.example.com,localhost:8080", where("console.allowed_hosts")))
		}
	}
	if !cs.Enabled {
		return
	}
	if c.HTTP.Addr == "" {
		v.add("console.enabled", "true", "the console is served by the admin server, which http.addr = \"\" disables",
			fmt.Sprintf("set http.addr (%s) to e.g. %s, or set console.enabled (%s) to false", where("http.addr"), example("http.addr"), where("console.enabled")))
		return
	}
	if cs.TokenFile != "" {
		return
	}
	if !cs.LocalhostWithoutToken {
		v.add("console.token_file", "", "the console requires a token: every page and action is refused without one",
			fmt.Sprintf("set console.token_file (%s) to a file of name:token lines, or, on a laptop with a loopback http.addr, set console.localhost_without_token (%s) to true", where("console.token_file"), where("console.localhost_without_token")))
		return
	}
	if !IsLoopback(c.HTTP.Addr) {
		v.add("console.localhost_without_token", "true", fmt.Sprintf("allows no token only on a loopback http.addr, and %s is not one", c.HTTP.Addr),
			fmt.Sprintf("set console.token_file (%s), or bind http.addr (%s) to 127.0.0.1", where("console.token_file"), where("http.addr")))
	}
}

// IsLoopback reports whether the host of addr (host:port) is a loopback
// address: 127.0.0.0/8, ::1 or localhost. An empty host (every interface)
// is not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
