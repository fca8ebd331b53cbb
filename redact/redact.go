// Package redact hides credentials in URLs and DSNs before they are printed,
// logged or stored: the password of a URL's userinfo, every credential-like
// query parameter (password, token, api_key, key, secret, sig, auth…), and
// password= / sslpassword= of a libpq keyword/value DSN. Standard library
// only, so every package that prints a URL can use it.
package redact

import (
	"net/url"
	"regexp"
)

// Mask replaces a hidden value.
const Mask = "xxxxx"

var (
	// dsnPassword matches password=... in a libpq keyword/value DSN, quoted
	// or not.
	dsnPassword = regexp.MustCompile(`(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)
	// secretParam matches the names of query parameters that carry a
	// credential: password, sslpassword, token, access_token, api_key,
	// apikey, key, secret, signature, sig, auth, credential(s).
	secretParam = regexp.MustCompile(`(?i)^(?:ssl)?(?:password|passwd|pwd)$|token$|^(?:api[-_]?)?key$|secret|^sig(?:nature)?$|^auth|credential`)
	// urlUserinfo matches user:password@ in a URL net/url cannot parse.
	urlUserinfo = regexp.MustCompile(`(://[^:/@?#]*:)[^/?#]*@`)
)

// URL replaces the password in a URL's userinfo and the value of
// every credential-like query parameter (see secretParam), or password= and
// sslpassword= of a keyword/value DSN. A value that does not
// parse is redacted by pattern, so a malformed URL never leaks its password
// into an error message.
func URL(s string) string {
	if s == "" {
		return s
	}
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Opaque == "" {
		changed := false
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), Mask)
			changed = true
		}
		if q, err := url.ParseQuery(u.RawQuery); err == nil {
			for k := range q {
				if secretParam.MatchString(k) {
					q[k] = []string{Mask}
					u.RawQuery = q.Encode()
					changed = true
				}
			}
		} else if dsnPassword.MatchString(u.RawQuery) {
			u.RawQuery = dsnPassword.ReplaceAllString(u.RawQuery, "${1}"+Mask)
			changed = true
		}
		if !changed {
			return s
		}
		return u.String()
	}
	s = urlUserinfo.ReplaceAllString(s, "${1}"+Mask+"@")
	return dsnPassword.ReplaceAllString(s, "${1}"+Mask)
}
