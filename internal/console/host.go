package console

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/httphost"
)

// hostGuard answers only requests whose Host header names the console: a
// loopback host (localhost, 127.0.0.1, [::1]) on the port the request
// arrived at, or an entry of console.allowed_hosts. It is what stops DNS
// rebinding: a page on the attacker's site whose name is then made to
// resolve to 127.0.0.1 is same-origin with whatever answers there, so the
// cross-origin checks pass and it could read a page's CSRF token — but its
// requests carry the attacker's name as Host. An IP address in Host cannot
// be rebound, and a loopback one is always the machine itself.
type hostGuard struct {
	allowed []httphost.Host
	log     *zap.Logger
	// logEvery spaces out the log lines of refusals: a hostile page can
	// send them in a loop.
	logEvery time.Duration
	mu       sync.Mutex
	logged   time.Time
}

// newHostGuard parses allowed (console.allowed_hosts).
func newHostGuard(allowed []string, log *zap.Logger) (*hostGuard, error) {
	g := &hostGuard{log: log, logEvery: time.Minute}
	for _, a := range allowed {
		hp, err := httphost.Parse(a)
		if err != nil {
			return nil, fmt.Errorf("console.allowed_hosts: an entry %w; fix: write host or host:port, e.g. console.example.com or localhost:8080", err)
		}
		g.allowed = append(g.allowed, hp)
	}
	return g, nil
}

// allows reports whether r's Host names the console. The port a loopback
// host must carry is the one of the connection's local address: the bound
// port, whatever http.addr said (port 0 included). Without that address
// (a handler served outside net/http's server) only the allowed hosts
// pass.
func (g *hostGuard) allows(r *http.Request) bool {
	hp, err := httphost.Parse(r.Host)
	if err != nil {
		return false
	}
	if isLoopbackHost(hp.Name) && hp.Port != "" && hp.Port == localPort(r) {
		return true
	}
	for _, a := range g.allowed {
		if a.Name == hp.Name && (a.Port == "" || a.Port == hp.Port) {
			return true
		}
	}
	return false
}

// isLoopbackHost reports whether host (normalised by httphost.Parse)
// is localhost or a loopback IP address.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// localPort is the port r arrived at, "" when unknown.
func localPort(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok && a.Port > 0 {
		return strconv.Itoa(a.Port)
	}
	return ""
}

// handler refuses a request that names another host with 421 Misdirected
// Request, before h (and so before any page, token or action) runs.
func (g *hostGuard) handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.allows(r) {
			h.ServeHTTP(w, r)
			return
		}
		if g.logNow() {
			g.log.Warn("console: refused a request for another host (DNS rebinding, or a name missing from console.allowed_hosts); further ones are logged at most once a minute",
				zap.String("host", r.Host), zap.String("remote", r.RemoteAddr))
		}
		port := localPort(r)
		if port == "" {
			port = "PORT"
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusMisdirectedRequest)
		_, _ = fmt.Fprintf(w, "console: refused: this request names the host %.100q, which is not one this console answers to "+
			"(a page of another site reaching it through DNS rebinding would name its own).\n"+
			"fix: open http://localhost:%s%s, or, if you reach the console by that name yourself (a proxy, a port-forward), add it to console.allowed_hosts (env %s)\n",
			r.Host, port, Prefix, config.EnvName("console.allowed_hosts"))
	})
}

// logNow reports whether a refusal may be logged (at most one a logEvery).
func (g *hostGuard) logNow() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if now.Sub(g.logged) < g.logEvery {
		return false
	}
	g.logged = now
	return true
}
