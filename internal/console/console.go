package console

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/internal/audit"
	"github.com/effectively-io/effectively/internal/pipeline"
	"github.com/effectively-io/effectively/internal/redact"
	"github.com/effectively-io/effectively/internal/replay"
	"github.com/effectively-io/effectively/internal/status"
)

// Prefix is where the console is mounted on the admin server.
const Prefix = "/console/"

// LocalOperator is the operator the log records when the console runs
// without a token on a loopback address.
const LocalOperator = "localhost"

// Options are what the console shows and acts with. The functions are the
// CLI commands' own code, wired by package service.
type Options struct {
	// Pool is the database the pages read and the actions write.
	Pool *pgxpool.Pool
	// Build names the binary in the header (name and version).
	Build string
	// Group and Topics are the worker's (the replay and audit forms' defaults).
	Group  string
	Topics []string
	// TokenFile is console.token_file; empty only with NoToken.
	TokenFile string
	// NoToken: every request is the operator "localhost" (a loopback
	// address with console.localhost_without_token). Requests must then
	// name a loopback host or one of AllowedHosts.
	NoToken bool
	// AllowedHosts is console.allowed_hosts: host or host:port entries the
	// console answers to besides a loopback host on its own port. With
	// NoToken, or when not empty, a request naming any other Host is
	// refused with 421 Misdirected Request (DNS rebinding).
	AllowedHosts []string
	// CookieSecure is console.cookie_secure: the session cookie is Secure
	// even when the request did not arrive over TLS (a proxy in front
	// terminates it).
	CookieSecure bool
	// History is the worker's throughput history; nil when the console runs
	// outside a worker.
	History *History
	// Status are where the overview reads the group's status from (what
	// `effectively status` prints).
	Status status.Sources
	// Redrive is `dlq redrive ID`: re-applies one dead letter.
	Redrive func(ctx context.Context, id int64) (pipeline.RedriveResult, error)
	// ReplayPlan is the dry run of `replay`, shown even while the group has
	// members (which it returns, for the page to say that execution is
	// refused).
	ReplayPlan func(ctx context.Context, group, topic string, from replay.From) (replay.Plan, []replay.Member, error)
	// ReplayExecute is `replay --execute`, with its checks: it returns a
	// [RefusedError] when a check refuses (members in the group, a target
	// ahead).
	ReplayExecute func(ctx context.Context, group, topic string, from replay.From) (replay.Plan, replay.Executed, error)
	// Audit is `audit`: what became of each record of a range of a topic.
	Audit func(ctx context.Context, topic string, from, to time.Time) (audit.Report, error)
	// Logger logs each action.
	Logger *zap.Logger
}

// RefusedError is an action a check refused (nothing was changed).
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Console serves the pages.
type Console struct {
	opts     Options
	sessions *sessions
	local    *session // NoToken's one session
	signIns  *signInLimiter
	pages    map[string]*template.Template
	now      func() time.Time
}

// New returns the console's handler, for the admin server to mount at
// [Prefix]. With a token file, it reads it once to fail at start-up.
func New(opts Options) (http.Handler, error) {
	_, h, err := newConsole(opts)
	return h, err
}

// newConsole is [New], returning the Console too (for tests to set its
// clock).
func newConsole(opts Options) (*Console, http.Handler, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if !opts.NoToken {
		if _, err := ReadTokens(opts.TokenFile); err != nil {
			return nil, nil, err
		}
	}
	c := &Console{opts: opts, sessions: newSessions(), signIns: newSignInLimiter(), now: time.Now}
	if opts.NoToken {
		c.local = &session{operator: LocalOperator, csrf: randomToken()}
	}
	pages, err := parsePages()
	if err != nil {
		return nil, nil, err
	}
	c.pages = pages

	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", http.FileServerFS(static)))
	mux.HandleFunc("GET "+Prefix+"login", c.loginPage)
	mux.HandleFunc("POST "+Prefix+"login", c.login)
	mux.HandleFunc("POST "+Prefix+"logout", c.auth(c.logout))
	mux.HandleFunc("GET "+Prefix+"{$}", c.auth(c.overview))
	mux.HandleFunc("GET "+Prefix+"dead-letters", c.auth(c.deadLetters))
	mux.HandleFunc("GET "+Prefix+"dead-letters/{id}", c.auth(c.deadLetter))
	mux.HandleFunc("POST "+Prefix+"dead-letters/redrive", c.auth(c.redrive))
	mux.HandleFunc("GET "+Prefix+"parked", c.auth(c.parked))
	mux.HandleFunc("POST "+Prefix+"parked/release", c.auth(c.parkedRelease))
	mux.HandleFunc("POST "+Prefix+"parked/drop", c.auth(c.parkedDrop))
	mux.HandleFunc("GET "+Prefix+"outbox", c.auth(c.outbox))
	mux.HandleFunc("GET "+Prefix+"outbox/{id}", c.auth(c.intent))
	mux.HandleFunc("POST "+Prefix+"outbox/{id}/resolve", c.auth(c.resolve))
	mux.HandleFunc("POST "+Prefix+"outbox/retry", c.auth(c.retry))
	mux.HandleFunc("GET "+Prefix+"replay", c.auth(c.replayPage))
	mux.HandleFunc("POST "+Prefix+"replay/execute", c.auth(c.replayExecute))
	mux.HandleFunc("GET "+Prefix+"audit", c.auth(c.auditPage))
	mux.HandleFunc("GET "+Prefix+"actions", c.auth(c.actions))
	mux.HandleFunc(Prefix, c.auth(func(w http.ResponseWriter, r *http.Request, se *session) {
		c.render(w, r, http.StatusNotFound, "result", se, "Not found", resultData{Outcome: OutcomeFailed, Lines: []string{"No console page is at " + r.URL.Path + "."}})
	}))

	// Cross-origin POSTs (a form on another site) are refused before any
	// page's handler: Sec-Fetch-Site, else Origin against Host.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		_, _ = fmt.Fprintln(w, "cross-origin request refused: console actions are taken from the console's own pages")
	}))
	h := cop.Handler(limitBody(mux))
	// The Host check goes first: a rebound name passes the cross-origin
	// checks (it is the page's own origin).
	guard, err := newHostGuard(opts.AllowedHosts, opts.Logger)
	if err != nil {
		return nil, nil, err
	}
	if opts.NoToken || len(opts.AllowedHosts) > 0 {
		h = guard.handler(h)
	}
	return c, securityHeaders(h), nil
}

// maxFormBytes bounds a form (a selection of a thousand IDs fits).
const maxFormBytes = 1 << 20

func limitBody(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		h.ServeHTTP(w, r)
	})
}

// auth serves h for a signed-in session; a POST must carry the session's
// CSRF token. Without a session it answers 401 with the sign-in form.
func (c *Console) auth(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		se := c.local
		if se == nil {
			if ck, err := r.Cookie(cookieName); err == nil {
				se = c.sessions.get(ck.Value, c.now())
			}
		}
		if se == nil {
			c.render(w, r, http.StatusUnauthorized, "login", nil, "Sign in", loginData{Next: r.URL.Path})
			return
		}
		if r.Method == http.MethodPost {
			if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(se.csrf)) != 1 {
				c.render(w, r, http.StatusForbidden, "result", se, "Refused", resultData{Outcome: OutcomeRefused,
					Lines: []string{"The form's CSRF token is missing or stale: nothing was done. Reload the page and submit it again."}})
				return
			}
		}
		h(w, r, se)
	}
}

type loginData struct {
	Next  string
	Error string
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if c.local != nil {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", nil, "Sign in", loginData{Next: r.URL.Query().Get("next")})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.PostFormValue("next"))
	if c.local != nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	client, now := clientOf(r.RemoteAddr), c.now()
	if wait := c.signIns.take(client, now); wait > 0 {
		secs := int64((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		c.render(w, r, http.StatusTooManyRequests, "login", nil, "Sign in", loginData{Next: next,
			Error: fmt.Sprintf("Too many failed sign-ins; this one was not checked. Try again in %d s.", secs)})
		return
	}
	tokens, err := ReadTokens(c.opts.TokenFile)
	if err != nil {
		c.signIns.refund(client, now) // the server's fault, not the client's
		c.opts.Logger.Error("console sign-in: the token file cannot be read", zap.Error(err))
		c.render(w, r, http.StatusInternalServerError, "login", nil, "Sign in", loginData{Next: next, Error: "The token file cannot be read; see the worker's log."})
		return
	}
	name, ok := match(tokens, strings.TrimSpace(r.PostFormValue("token")))
	if !ok {
		c.opts.Logger.Warn("console sign-in refused: the token is not in console.token_file", zap.String("remote", r.RemoteAddr))
		c.render(w, r, http.StatusUnauthorized, "login", nil, "Sign in", loginData{Next: next, Error: "That token is not in console.token_file."})
		return
	}
	c.signIns.refund(client, now)
	id, _ := c.sessions.create(name, now)
	http.SetCookie(w, c.cookie(r, id, int(SessionTTL/time.Second)))
	c.opts.Logger.Info("console sign-in", zap.String("operator", name), zap.String("remote", r.RemoteAddr))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// cookie is the session cookie: HttpOnly (no script reads it),
// SameSite=Strict (no other site's request carries it), scoped to the
// console, and Secure over TLS or with console.cookie_secure. maxAge < 0
// deletes it.
func (c *Console) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: cookieName, Value: value, Path: Prefix, HttpOnly: true, Secure: r.TLS != nil || c.opts.CookieSecure,
		SameSite: http.SameSiteStrictMode, MaxAge: maxAge}
}

// safeNext is where a sign-in goes: next when it is a clean path of a
// console page, else the Overview — never another site. A browser reads
// `\` as `/`, and "/console/../\host" cleans to "/\host", which it
// follows to //host; so next must be made of plain path characters only
// (no backslash, no percent-encoding, no colon, query or fragment), be
// unchanged by path.Clean (no dot segments, no //) and start with /console/.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, Prefix+"login") {
		return Prefix
	}
	for _, b := range []byte(next) {
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte("/-._~", b) >= 0) {
			return Prefix
		}
	}
	clean := path.Clean(next)
	if strings.HasSuffix(next, "/") {
		clean += "/"
	}
	if clean != next {
		return Prefix
	}
	return next
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, _ *session) {
	if ck, err := r.Cookie(cookieName); err == nil {
		c.sessions.delete(ck.Value)
	}
	http.SetCookie(w, c.cookie(r, "", -1))
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// page is what every template gets.
type page struct {
	Title    string
	Build    string
	Operator string
	CSRF     string
	Path     string
	NoToken  bool
	Data     any
}

// pageNames are the templates, each parsed with the layout.
var pageNames = []string{"login", "result", "confirm", "overview", "deadletters", "deadletter", "parked", "outbox", "intent", "replay", "audit", "actions"}

func parsePages() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, se *session, title string, data any) {
	if rd, ok := data.(resultData); ok {
		// An action's outcome is an error text more often than not, and
		// may hold a URL (a redrive's prefetch): redacted on the page.
		data = rd.redacted()
	}
	p := page{Title: title, Build: c.opts.Build, Path: r.URL.Path, NoToken: c.local != nil, Data: data}
	if se != nil {
		p.Operator, p.CSRF = se.operator, se.csrf
	}
	var b strings.Builder
	if err := c.pages[name].Execute(&b, p); err != nil {
		c.opts.Logger.Error("console: rendering a page failed", zap.String("page", name), zap.Error(err))
		http.Error(w, "rendering the page failed; see the worker's log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// resultData is an action's outcome page.
type resultData struct {
	Outcome string
	Lines   []string
	Rows    []resultRow
	Back    string
	BackTo  string
}

type resultRow struct {
	Target, Outcome, Result string
}

// redacted is d with the credentials of any URL in its texts hidden.
func (d resultData) redacted() resultData {
	lines := make([]string, len(d.Lines))
	for i, l := range d.Lines {
		lines[i] = redact.Text(l)
	}
	rows := make([]resultRow, len(d.Rows))
	for i, r := range d.Rows {
		r.Result = redact.Text(r.Result)
		rows[i] = r
	}
	d.Lines, d.Rows = lines, rows
	return d
}

// confirmData is a confirmation that says what an action will do.
type confirmData struct {
	Consequence []string
	Items       []string
	Action      string
	Fields      []field
	Button      string
	Back        string
}

type field struct{ Name, Value string }

// record appends an action to the operator-action log and logs it; a
// failure to record is logged and shown, never hidden.
func (c *Console) record(ctx context.Context, se *session, action, target, outcome, result string) error {
	a := Action{Operator: se.operator, Action: action, Target: target, Outcome: outcome, Result: result}
	c.opts.Logger.Info("console action", zap.String("operator", a.Operator), zap.String("action", action), zap.String("target", target),
		zap.String("outcome", outcome), zap.String("result", result))
	if err := RecordAction(context.WithoutCancel(ctx), c.opts.Pool, a); err != nil {
		c.opts.Logger.Error("console: recording an action failed", zap.Error(err))
		return err
	}
	return nil
}

// outcomeOf classifies an action's error.
func outcomeOf(err error) string {
	var refused *RefusedError
	switch {
	case err == nil:
		return OutcomeOK
	case errors.As(err, &refused):
		return OutcomeRefused
	}
	return OutcomeFailed
}

var funcs = template.FuncMap{
	"num": func(v *int64) string {
		if v == nil {
			return "–"
		}
		return fmt.Sprint(*v)
	},
	"deref": func(s *string) string {
		if s == nil {
			return "–"
		}
		return *s
	},
	"ts": func(t any) string {
		switch t := t.(type) {
		case time.Time:
			if t.IsZero() {
				return "–"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		case *time.Time:
			if t == nil || t.IsZero() {
				return "–"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		}
		return "–"
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return time.Since(t).Round(time.Second).String()
	},
	"text": func(b []byte) string { return excerpt(b, payloadExcerpt) },
	"header": func(raw json.RawMessage) string {
		var h struct {
			Key         string `json:"key"`
			Value       string `json:"value"`
			ValueBase64 string `json:"value_base64"`
		}
		if json.Unmarshal(raw, &h) != nil {
			return string(raw)
		}
		if h.ValueBase64 != "" {
			return h.Key + ": (base64) " + h.ValueBase64
		}
		return h.Key + ": " + h.Value
	},
	"join": func(ps []int32) string {
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = fmt.Sprint(p)
		}
		return strings.Join(s, ", ")
	},
	"isUnknown": func(s any) bool { return fmt.Sprint(s) == "unknown" },
	"isRetryable": func(s any) bool {
		switch fmt.Sprint(s) {
		case "dead_lettered", "suppressed", "pending":
			return true
		}
		return false
	},
}

// payloadExcerpt is how much of a payload a page shows.
const payloadExcerpt = 4 << 10

// excerpt is up to n bytes of b as text: valid UTF-8 as is (the template
// escapes it), anything else quoted.
func excerpt(b []byte, n int) string {
	cut := b
	if len(cut) > n {
		cut = cut[:n]
		for i := 0; i < utf8.UTFMax-1 && len(cut) > 0 && !utf8.Valid(cut); i++ {
			cut = cut[:len(cut)-1] // a rune cut in half
		}
	}
	var s string
	if utf8.Valid(cut) {
		s = string(cut)
	} else {
		s = fmt.Sprintf("(not UTF-8) %q", cut)
	}
	if len(cut) < len(b) {
		s += fmt.Sprintf("\n… (%d more bytes)", len(b)-len(cut))
	}
	return s
}
