package console

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// SessionTTL is how long a sign-in lasts.
const SessionTTL = 12 * time.Hour

// cookieName is the session cookie's name.
const cookieName = "effectively_console"

// maxSessions bounds the sessions kept in memory; past it the oldest go.
const maxSessions = 1000

// session is a signed-in operator.
type session struct {
	operator string
	csrf     string
	expires  time.Time
}

// sessions are the signed-in operators, in memory: a restart signs everyone
// out.
type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

func newSessions() *sessions { return &sessions{m: map[string]*session{}} }

func (s *sessions) create(operator string, now time.Time) (string, *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, se := range s.m {
		if now.After(se.expires) {
			delete(s.m, id)
		}
	}
	if len(s.m) >= maxSessions {
		var oldest string
		for id, se := range s.m {
			if oldest == "" || se.expires.Before(s.m[oldest].expires) {
				oldest = id
			}
		}
		delete(s.m, oldest)
	}
	id := randomToken()
	se := &session{operator: operator, csrf: randomToken(), expires: now.Add(SessionTTL)}
	s.m[id] = se
	return id, se
}

func (s *sessions) get(id string, now time.Time) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.m[id]
	if se == nil || now.After(se.expires) {
		delete(s.m, id)
		return nil
	}
	return se
}

func (s *sessions) delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// randomToken is 32 random bytes, URL-safe base64.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ErrNoTokens: the token file holds no token.
var ErrNoTokens = errors.New("holds no token")

// token is one line of the token file.
type token struct{ name, secret string }

// ReadTokens reads a token file: one token per line, name:token or a lone
// token (named operator); blank lines and # comments are skipped.
func ReadTokens(path string) ([]token, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("console.token_file %s: %w; fix: create it with a line name:token, readable by the worker", path, err)
	}
	var out []token
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, secret, ok := strings.Cut(line, ":")
		if !ok {
			name, secret = "operator", line
		}
		name, secret = strings.TrimSpace(name), strings.TrimSpace(secret)
		if name == "" || len(secret) < 16 {
			return nil, fmt.Errorf("console.token_file %s: a line has no name or a token shorter than 16 characters; fix: write name:token with a long random token (e.g. openssl rand -hex 32)", path)
		}
		out = append(out, token{name: name, secret: secret})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("console.token_file %s: %w; fix: add a line name:token", path, ErrNoTokens)
	}
	return out, nil
}

// match returns the name of the token equal to secret, comparing every
// token in constant time.
func match(tokens []token, secret string) (string, bool) {
	name, found := "", false
	for _, t := range tokens {
		if subtle.ConstantTimeCompare([]byte(t.secret), []byte(secret)) == 1 && !found {
			name, found = t.name, true
		}
	}
	return name, found
}

// securityHeaders sets the headers every console response carries: no
// inline script or style (CSP), no framing, no sniffing, no referrer, no
// caching of pages that show payloads.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}
