package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// validateConsole checks the console's keys: it needs the admin server, and
// a token file unless it may run without one on a loopback address.
func (c Config) validateConsole(v *validator) {
	cs := c.Console
	v.durationBetween("console.history_interval", cs.HistoryInterval, time.Second, 5*time.Minute, "")
	for _, h := range cs.AllowedHosts {
		if _, err := ParseHostPort(h); err != nil {
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

// HostPort is a host and an optional port as a Host header or an entry of
// console.allowed_hosts spells them, normalised for comparison: the host in
// lower case, an IP address in its canonical form (an IPv6 one without
// brackets), the port in decimal without leading zeros, "" when absent.
type HostPort struct {
	// Host is a DNS name or an IP address.
	Host string
	// Port is 1–65535 in decimal, or "" when s named none.
	Port string
}

// ParseHostPort parses host or host:port: a DNS name (letters, digits,
// hyphens and underscores in dot-separated labels), an IPv4 address or a
// bracketed IPv6 address, then an optional port. It refuses every other
// spelling — a scheme, a path, userinfo, a trailing dot, an empty label, an
// unbracketed IPv6 address, a zone — so that no variant of a name slips
// past a comparison with the normalised form.
func ParseHostPort(s string) (HostPort, error) {
	host, port, hasPort := s, "", false
	if rest, ok := strings.CutPrefix(s, "["); ok {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return HostPort{}, fmt.Errorf("%q has no ] after its IPv6 address", s)
		}
		host = rest[:end]
		if after := rest[end+1:]; after != "" {
			p, ok := strings.CutPrefix(after, ":")
			if !ok {
				return HostPort{}, fmt.Errorf("%q has something other than :port after its IPv6 address", s)
			}
			port, hasPort = p, true
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return HostPort{}, fmt.Errorf("%q has no IPv6 address (without a zone) in its brackets", s)
		}
		host = ip.String()
	} else {
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			host, port, hasPort = s[:i], s[i+1:], true
		}
		if strings.Contains(host, ":") {
			return HostPort{}, fmt.Errorf("%q: an IPv6 address goes in brackets, [::1]:9410", s)
		}
		host = strings.ToLower(host)
		if ip, err := netip.ParseAddr(host); err == nil {
			host = ip.String()
		} else if err := checkDNSName(host); err != nil {
			return HostPort{}, fmt.Errorf("%q: %w", s, err)
		}
	}
	if hasPort {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return HostPort{}, fmt.Errorf("%q has no port 1-65535 after its colon", s)
		}
		port = strconv.FormatUint(n, 10)
	}
	return HostPort{Host: host, Port: port}, nil
}

// checkDNSName checks that name (lower case) is a DNS name a browser sends:
// at most 253 characters, labels of 1–63 letters, digits, hyphens and
// underscores, not starting or ending with a hyphen, and no trailing dot.
func checkDNSName(name string) error {
	if name == "" {
		return errors.New("has no host")
	}
	if len(name) > 253 {
		return errors.New("is longer than a DNS name can be (253)")
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return errors.New("has an empty label (a trailing dot or two dots in a row)")
		}
		if len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("has a label (%s) that is longer than 63 characters or starts or ends with a hyphen", label)
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("is not host or host:port (a DNS name has letters, digits, hyphens and dots; %q is none)", rune(c))
			}
		}
	}
	return nil
}
