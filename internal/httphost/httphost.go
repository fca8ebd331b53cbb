// Package httphost parses the host of an HTTP request (its Host header) and
// the entries of a list of allowed hosts into one normal form, strictly, so
// that comparing them cannot be fooled by another spelling of a name.
package httphost

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Host is a host and an optional port as a Host header or an entry of
// console.allowed_hosts spells them, normalised for comparison: the name in
// lower case, an IP address in its canonical form (an IPv6 one without
// brackets), the port in decimal without leading zeros, "" when absent.
type Host struct {
	// Name is a DNS name or an IP address.
	Name string
	// Port is 1–65535 in decimal, or "" when none was given.
	Port string
}

// Parse parses host or host:port: a DNS name (letters, digits,
// hyphens and underscores in dot-separated labels), an IPv4 address or a
// bracketed IPv6 address, then an optional port. It refuses every other
// spelling — a scheme, a path, userinfo, a trailing dot, an empty label, an
// unbracketed IPv6 address, a zone — so that no variant of a name slips
// past a comparison with the normalised form.
func Parse(s string) (Host, error) {
	host, port, hasPort := s, "", false
	if rest, ok := strings.CutPrefix(s, "["); ok {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return Host{}, fmt.Errorf("%q has no ] after its IPv6 address", s)
		}
		host = rest[:end]
		if after := rest[end+1:]; after != "" {
			p, ok := strings.CutPrefix(after, ":")
			if !ok {
				return Host{}, fmt.Errorf("%q has something other than :port after its IPv6 address", s)
			}
			port, hasPort = p, true
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return Host{}, fmt.Errorf("%q has no IPv6 address (without a zone) in its brackets", s)
		}
		host = ip.String()
	} else {
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			host, port, hasPort = s[:i], s[i+1:], true
		}
		if strings.Contains(host, ":") {
			return Host{}, fmt.Errorf("%q: an IPv6 address goes in brackets, [::1]:9410", s)
		}
		host = strings.ToLower(host)
		if ip, err := netip.ParseAddr(host); err == nil {
			host = ip.String()
		} else if err := checkDNSName(host); err != nil {
			return Host{}, fmt.Errorf("%q: %w", s, err)
		}
	}
	if hasPort {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return Host{}, fmt.Errorf("%q has no port 1-65535 after its colon", s)
		}
		port = strconv.FormatUint(n, 10)
	}
	return Host{Name: host, Port: port}, nil
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
