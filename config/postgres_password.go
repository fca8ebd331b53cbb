package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
)

// readSecretFile reads a secret from a file: its content without the
// trailing newline a mounted secret often has.
func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cannot be read: %w", errors.Unwrap(err))
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", errors.New("is empty")
	}
	return s, nil
}

// hasPassword reports whether a postgres URL or DSN carries a password.
func hasPassword(s string) bool {
	if u, err := url.Parse(s); err == nil && strings.Contains(s, "://") {
		if _, ok := u.User.Password(); ok {
			return true
		}
		return u.Query().Has("password")
	}
	return dsnPlainPassword.MatchString(s)
}

// dsnPlainPassword matches password= (not sslpassword=) in a DSN.
var dsnPlainPassword = regexp.MustCompile(`(?i)(^|\s)password\s*=`)

// withPassword returns the postgres URL or DSN s with password set.
func withPassword(s, password string) string {
	if strings.Contains(s, "://") {
		if u, err := url.Parse(s); err == nil {
			u.User = url.UserPassword(u.User.Username(), password)
			return u.String()
		}
	}
	quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(password)
	return s + " password='" + quoted + "'"
}

// applyPasswordFile puts the password of postgres.password_file into
// postgres.url, where every connection reads it (it stays redacted in
// `config` output and messages).
func (c *Config) applyPasswordFile() {
	if c.Postgres.PasswordFile == "" {
		return
	}
	if pw, err := readSecretFile(c.Postgres.PasswordFile); err == nil {
		c.Postgres.URL = withPassword(c.Postgres.URL, pw)
	}
}
