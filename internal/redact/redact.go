package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
)

// Mask replaces a hidden value.
const Mask = "xxxxx"

// Policy is what a deployment adds to the built-in rules. The zero value
// redacts by the built-in rules only.
type Policy struct {
	// Params are more query parameter names whose values are hidden,
	// compared as the built-in ones are (see [SecretParam]).
	Params []string
	// Paths mark path segments as secret, in addition to [DefaultPaths].
	Paths []PathRule
}

// PathRule makes every path segment after Prefix secret in the URLs of
// Host: a webhook URL whose last segments are its credential
// (https://hooks.slack.com/services/T…/B…/<secret>).
type PathRule struct {
	// Host is the URL's host name, without port, compared case-insensitively;
	// empty matches every host.
	Host string
	// Prefix is the path the secret segments follow ("/services/"). It
	// matches whole segments: "/hooks" matches /hooks/x, not /hooksx.
	Prefix string
}

// DefaultPaths are the built-in path rules: webhook and bot URLs whose
// path is their credential. Slack's shape (/services/T…/B…/…) is also
// recognised on any host (a proxy, Slack GovSlack).
var DefaultPaths = []PathRule{
	{Host: "hooks.slack.com", Prefix: "/services/"},
	{Host: "discord.com", Prefix: "/api/webhooks/"},
	{Host: "discordapp.com", Prefix: "/api/webhooks/"},
	{Host: "api.telegram.org", Prefix: "/"},
}

// current is the process's policy (SetDefault): redaction happens in every
// package that prints or stores an error, and the deployment's additions
// are a fact of the process, like its log level.
var current atomic.Pointer[Policy]

// SetDefault makes p the policy of the package-level functions ([URL],
// [Text], [Error]). A worker sets it once, from its configuration, before
// it starts.
func SetDefault(p Policy) {
	p.Params = slices.Clone(p.Params)
	p.Paths = slices.Clone(p.Paths)
	current.Store(&p)
}

func policy() *Policy {
	if p := current.Load(); p != nil {
		return p
	}
	return &Policy{}
}

// URL hides the credentials of a URL or DSN by the process's policy (see
// the package documentation).
func URL(s string) string { return policy().URL(s) }

// Text hides the credentials of every URL in s, and password= /
// sslpassword= of a keyword/value DSN, by the process's policy.
func Text(s string) string { return policy().Text(s) }

// Error returns err with the credentials of every URL in its text hidden,
// by the process's policy (see [Policy.Error]).
func Error(err error) error { return policy().Error(err) }

// Secret-looking parameter names, after normalisation (lower case, without
// '-', '_', '.', '[' and ']'): X-Amz-Signature is xamzsignature.
var (
	// secretExact are names that are a credential only as a whole: sig
	// (Azure SAS), code (an OAuth authorization code).
	secretExact = []string{"sig", "code", "pass", "pwd", "passwd", "session", "sessionid", "jwt", "assertion", "otp"}
	// secretContains are names that are a credential wherever they occur:
	// access_token, client_secret, X-Amz-Credential, X-Amz-Security-Token,
	// X-Goog-Signature, api_key, sslpassword.
	secretContains = []string{"password", "passphrase", "secret", "token", "credential", "signature", "apikey", "accesskey", "privatekey"}
	// secretSuffixes end a credential's name: key, subscription-key, sig.
	secretSuffixes = []string{"key", "sig"}
	// secretPrefixes start one: auth, authorization, auth_token.
	secretPrefixes = []string{"auth"}
	// notSecret match the rules above but name a file, not its content:
	// libpq's sslkey.
	notSecret = []string{"sslkey"}
)

func normalizeParam(name string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '-', '_', '.', '[', ']':
			return -1
		}
		return r
	}, strings.ToLower(name))
}

// SecretParam reports whether a query parameter named name carries a
// credential, by the process's policy (see [Policy.SecretParam]).
func SecretParam(name string) bool { return policy().SecretParam(name) }

// builtinSecretParam reports whether name is a credential's by the
// built-in rules (see [Policy.SecretParam]).
func builtinSecretParam(name string) bool {
	n := normalizeParam(name)
	if n == "" || slices.Contains(notSecret, n) {
		return false
	}
	if slices.Contains(secretExact, n) {
		return true
	}
	for _, s := range secretContains {
		if strings.Contains(n, s) {
			return true
		}
	}
	for _, s := range secretSuffixes {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	for _, s := range secretPrefixes {
		if strings.HasPrefix(n, s) {
			return true
		}
	}
	return false
}

// SecretParam reports whether a query parameter named name carries a
// credential: by the built-in rules, or because it is one of p.Params. The
// name is compared in lower case without '-', '_', '.', '[' and ']'
// (X-Amz-Signature is xamzsignature), p.Params too (X-My-Key matches
// x_my_key). By the built-in rules it is secret when it is one of sig,
// code, pass, pwd, passwd, session, sessionid, jwt, assertion, otp;
// contains password, passphrase, secret, token, credential, signature,
// apikey, accesskey or privatekey; ends with key or sig; or starts with
// auth — except sslkey, the name of libpq's key file. That covers
// password, token, access_token, api_key, apikey, key, secret,
// client_secret, signature, X-Amz-Signature, X-Amz-Credential and
// X-Amz-Security-Token.
func (p *Policy) SecretParam(name string) bool {
	if builtinSecretParam(name) {
		return true
	}
	n := normalizeParam(name)
	for _, extra := range p.Params {
		if normalizeParam(extra) == n {
			return true
		}
	}
	return false
}

var (
	// dsnPassword matches password=... in a libpq keyword/value DSN, quoted
	// or not.
	dsnPassword = regexp.MustCompile(`(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)
	// urlUserinfo matches the userinfo of a URL net/url cannot parse: up to
	// the authority's last '@', as net/url reads it, so that what this
	// leaves parses to the same user ("a://%@@" is user "%@").
	urlUserinfo = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.\-]*://)([^/?#\s]*)@`)
	// urlParam matches a name=value pair of a query or fragment net/url
	// cannot parse.
	urlParam = regexp.MustCompile(`([?&;#])([^=&;#?\s]*)=([^&;#\s]*)`)
	// slackShape is Slack's incoming-webhook path, on any host.
	slackShape = regexp.MustCompile(`^/services/T[A-Z0-9]+/B[A-Z0-9]+/`)
)

// URL hides the credentials of a URL or DSN by p (see the package
// documentation). A value that does not parse is redacted by pattern, so a
// malformed URL never leaks its password into an error message. Anything
// else of the URL — scheme, host, port, other parameters, their order and
// encoding — is kept.
func (p *Policy) URL(s string) string {
	if s == "" {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		return p.byPattern(s)
	}
	changed := false
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			if pw != Mask {
				u.User = url.UserPassword(u.User.Username(), Mask)
				changed = true
			}
		} else if name := u.User.Username(); name != "" && name != Mask && !isPostgres(u.Scheme) {
			u.User = url.User(Mask)
			changed = true
		}
	}
	if q, ok := p.params(u.RawQuery); ok {
		u.RawQuery = q
		changed = true
	}
	if u.Fragment != "" {
		if f, ok := p.params(u.EscapedFragment()); ok {
			u.Fragment, _ = url.PathUnescape(f)
			u.RawFragment = f
			changed = true
		}
	}
	if path, ok := p.path(u.Hostname(), u.EscapedPath()); ok {
		u.Path, _ = url.PathUnescape(path)
		u.RawPath = path
		changed = true
	}
	if !changed {
		return s
	}
	return u.String()
}

func isPostgres(scheme string) bool {
	return strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql")
}

// params hides the secret values of a raw query (or fragment), keeping the
// order and the encoding of everything else; ok is false when nothing was
// hidden.
func (p *Policy) params(raw string) (string, bool) {
	if raw == "" || !strings.Contains(raw, "=") {
		return raw, false
	}
	pairs := strings.Split(raw, "&")
	changed := false
	for i, pair := range pairs {
		name, value, ok := strings.Cut(pair, "=")
		if !ok || value == Mask {
			continue
		}
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if p.SecretParam(name) {
			pairs[i] = pair[:len(pair)-len(value)] + Mask
			changed = true
		}
	}
	return strings.Join(pairs, "&"), changed
}

// path masks the segments after a secret prefix of an escaped path; ok is
// false when no rule applies.
func (p *Policy) path(host, escaped string) (string, bool) {
	prefix := ""
	if slackShape.MatchString(escaped) {
		prefix = "/services/"
	}
	for _, rules := range [][]PathRule{DefaultPaths, p.Paths} {
		for _, r := range rules {
			if prefix == "" && (r.Host == "" || strings.EqualFold(r.Host, host)) && segmentPrefix(escaped, r.Prefix) {
				prefix = r.Prefix
			}
		}
	}
	if prefix == "" {
		return escaped, false
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	rest := strings.Split(escaped[min(len(prefix), len(escaped)):], "/")
	changed := false
	for i, seg := range rest {
		if seg != "" && seg != Mask {
			rest[i] = Mask
			changed = true
		}
	}
	return escaped[:min(len(prefix), len(escaped))] + strings.Join(rest, "/"), changed
}

// segmentPrefix reports whether path starts with prefix at a segment
// boundary.
func segmentPrefix(path, prefix string) bool {
	if prefix == "" || !strings.HasPrefix(path, prefix) {
		return false
	}
	return strings.HasSuffix(prefix, "/") || len(path) == len(prefix) || path[len(prefix)] == '/'
}

// byPattern redacts what net/url cannot parse: userinfo, secret
// parameters, Slack's path shape, and a DSN's passwords.
func (p *Policy) byPattern(s string) string {
	s = urlUserinfo.ReplaceAllStringFunc(s, func(m string) string {
		sub := urlUserinfo.FindStringSubmatch(m)
		scheme, info := sub[1], sub[2]
		if user, _, ok := strings.Cut(info, ":"); ok {
			return scheme + user + ":" + Mask + "@"
		}
		if info == "" || isPostgres(strings.TrimSuffix(scheme, "://")) {
			return m
		}
		return scheme + Mask + "@"
	})
	if strings.Contains(s, "/services/") {
		if i := strings.Index(s, "://"); i >= 0 {
			rest := s[i+3:]
			if j := strings.IndexByte(rest, '/'); j >= 0 && slackShape.MatchString(rest[j:]) {
				path, tail := rest[j:], ""
				if k := strings.IndexAny(path, "?# "); k >= 0 {
					path, tail = path[:k], path[k:]
				}
				masked, _ := p.path("", path)
				s = s[:i+3] + rest[:j] + masked + tail
			}
		}
	}
	s = urlParam.ReplaceAllStringFunc(s, func(m string) string {
		sub := urlParam.FindStringSubmatch(m)
		name := sub[2]
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if !p.SecretParam(name) {
			return m
		}
		return sub[1] + sub[2] + "=" + Mask
	})
	return dsnPassword.ReplaceAllString(s, "${1}"+Mask)
}
