package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/proctest"
)

// consoleToken is the test operator's token (console.token_file line
// alice:<token>).
const consoleToken = "c0ns0le-t3st-t0ken-0123456789abcdef"

// consolePages are every page of the console.
var consolePages = []string{"/console/", "/console/dead-letters", "/console/dead-letters/1", "/console/parked", "/console/outbox",
	"/console/outbox/1", "/console/replay", "/console/audit", "/console/actions"}

// screenshotDir is where the console's screenshots go: docs/ with
// EFFECTIVELY_UPDATE_SCREENSHOTS=1 (to commit them), else a temporary
// directory.
func screenshotDir(t *testing.T) string {
	if os.Getenv("EFFECTIVELY_UPDATE_SCREENSHOTS") == "1" {
		dir, err := filepath.Abs("../docs/operations/console")
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		return dir
	}
	return t.TempDir()
}

// The operations console in real headless Chromium against a worker on the
// real stack: a poison event is dead-lettered, its cause is fixed, it is
// redriven from the page and its effect exists once; an unknown intent is
// resolved from the page; a replay plan is shown and its execution refused
// while the worker runs; every page refuses without the token; forged
// cross-site POSTs are refused. Each page is screenshotted.
func TestConsoleInTheBrowser(t *testing.T) {
	t.Parallel()
	if _, err := findBrowser(); err != nil {
		t.Fatalf("%v; fix: apt-get install -y chromium (make test runs test/ensure-chromium.sh)", err)
	}
	r := newRig(t, 2)
	ctx := context.Background()
	// The cause a team fixes: a constraint that rejects the name "poison".
	_, err := r.db.Pool.Exec(ctx, `ALTER TABLE accounts ADD CONSTRAINT console_no_poison CHECK (name <> 'poison')`)
	require.NoError(t, err)

	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("# operators\nalice:"+consoleToken+"\n"), 0o600))
	addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	base := "http://" + addr
	w := r.startedWorker(t, "EFFECTIVELY_HTTP_ADDR="+addr, "EFFECTIVELY_CONSOLE_ENABLED=true",
		"EFFECTIVELY_CONSOLE_TOKEN_FILE="+tokens, "EFFECTIVELY_CONSOLE_HISTORY_INTERVAL=1s")
	require.False(t, w.exited(), "the worker runs: %s", tail(w.stderr.String(), 20))

	// Good accounts, one poison (rejected by the constraint: dead-lettered),
	// one record that is not an event (invalid: stays dead).
	recs := []*kgo.Record{
		cetest.Account(r.topic, "open-c1", "account.opened", "c1", 1, "Ada"),
		cetest.Account(r.topic, "open-c2", "account.opened", "c2", 1, "Grace"),
		cetest.Account(r.topic, "open-poison", "account.opened", "p1", 1, "poison"),
		// A ledger entry for an account never opened: parked.
		cetest.Ledger(r.topic, "g1", "ledger.credited", "ghost", 5, "EUR"),
		{Topic: r.topic, Key: []byte("junk"), Value: []byte(`{"not": "an event", "x": "<script>document.title='pwned'</script>"`), Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json")}}},
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	require.NoError(t, kafkatest.Producer(t).ProduceSync(pctx, recs...).FirstErr())
	waitUntil(t, "both dead letters and the parked entry", 2*time.Minute, func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM dead_letters`) == 2 && r.db.Count(t, `SELECT count(*) FROM parked_events WHERE state = 'parked'`) == 1
	})
	var poisonID, junkID int64
	require.NoError(t, r.db.Pool.QueryRow(ctx, `SELECT id FROM dead_letters WHERE event_key = $1`, cetest.Key("open-poison")).Scan(&poisonID))
	require.NoError(t, r.db.Pool.QueryRow(ctx, `SELECT id FROM dead_letters WHERE id <> $1`, poisonID).Scan(&junkID))
	require.Zero(t, r.db.Count(t, `SELECT count(*) FROM accounts WHERE id = 'p1'`))

	// An intent a crash left in doubt (a call without idempotency caught
	// mid-call: test/outbox_test.go makes them with SIGKILL).
	var intentID int64
	require.NoError(t, r.db.Pool.QueryRow(ctx, `INSERT INTO outbox (event_key, operation, resource, method, target, request, idempotency_key, idempotent, state, attempts, last_error)
VALUES ($1, 'notify.welcome', 'c1', 'POST', 'https://notify.example/send', '{"to": "c1"}', 'idem-c1', false, 'unknown', 1, 'the dispatcher stopped mid-call (lease expired)') RETURNING id`,
		cetest.Key("open-c1")).Scan(&intentID))

	// Every page refuses without the token.
	plain := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range consolePages {
		resp, err := plain.Get(base + p)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s without a token", p)
		require.Contains(t, string(body), "Sign in", p)
		require.NotContains(t, string(body), "poison", p)
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'", p)
		require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), p)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), p)
		require.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"), p)
	}
	resp, err := plain.PostForm(base+"/console/dead-letters/redrive", url.Values{"id": {fmt.Sprint(junkID)}, "confirm": {"yes"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "an action without a token")
	resp, err = plain.PostForm(base+"/console/login", url.Values{"token": {"not-the-token-0123456789"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a wrong token")

	// The browser.
	shots := screenshotDir(t)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1200, 900))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			buf, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), buf, 0o644)
		})
	}
	// Each step gets a hang guard of its own (derived from the browser's
	// context once it has run, as chromedp asks).
	_, err = chromedp.Run(bctx, chromedp.Title())
	require.NoError(t, err)
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, time.Minute)
		defer cancel()
		require.NoError(t, chromedp.Do(sctx, steps...))
	}
	text := func(sel string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, time.Minute)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err)
		return s
	}
	visible := func(id string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.ID(id)) }

	// Sign in.
	do(chromedp.Navigate(base+"/console/"), visible("token"), shot("login"),
		chromedp.SendKeys(chromedp.ID("token"), consoleToken), chromedp.Submit(chromedp.ID("token")), visible("operator"))
	require.Equal(t, "alice", text("#operator"))
	// Traffic for the chart: waves of new accounts a second apart, then the
	// overview, wide and on a phone's width.
	for wave := range 6 {
		var batch []*kgo.Record
		for i := range 40 * (wave%3 + 1) {
			id := fmt.Sprintf("w%d-%d", wave, i)
			batch = append(batch, cetest.Account(r.topic, "open-"+id, "account.opened", id, 1, "n-"+id))
		}
		require.NoError(t, kafkatest.Producer(t).ProduceSync(pctx, batch...).FirstErr())
		time.Sleep(time.Second)
	}
	waitUntil(t, "the waves applied", time.Minute, func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM accounts`) == 2+40*(1+2+3)*2
	})
	time.Sleep(1500 * time.Millisecond)
	do(chromedp.Reload(), visible("partitions"), shot("overview"))
	require.Contains(t, text("main"), "applied: ")
	do(chromedp.EmulateViewport(390, 844), chromedp.Reload(), visible("partitions"), shot("overview-phone"), chromedp.EmulateViewport(1200, 900))

	// The dead letter appears.
	do(chromedp.Navigate(base+"/console/dead-letters"), visible("letters"), shot("dead-letters"))
	require.Contains(t, text("#letters"), "integrity_constraint_violation")
	do(chromedp.Navigate(fmt.Sprintf("%s/console/dead-letters/%d", base, poisonID)), visible("payload"), shot("dead-letter"))
	require.Contains(t, text("#payload"), `"name":"poison"`)
	// A hostile payload is shown as text, never run.
	do(chromedp.Navigate(fmt.Sprintf("%s/console/dead-letters/%d", base, junkID)), visible("payload"))
	require.Contains(t, text("#payload"), "<script>document.title='pwned'</script>")
	title, err := chromedp.Run(bctx, chromedp.Title())
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("Dead letter %d · effectively console", junkID), title)
	do(chromedp.Navigate(fmt.Sprintf("%s/console/dead-letters/%d", base, poisonID)), visible("payload"))

	// The cause is fixed; the redrive from the page says what it will do,
	// then does it.
	_, err = r.db.Pool.Exec(ctx, `ALTER TABLE accounts DROP CONSTRAINT console_no_poison`)
	require.NoError(t, err)
	do(chromedp.Click(chromedp.ID("redrive")), visible("consequence"), shot("redrive-confirm"))
	require.Contains(t, text("#consequence"), "nothing applies twice")
	require.Zero(t, r.db.Count(t, `SELECT count(*) FROM accounts WHERE id = 'p1'`), "the confirmation does nothing")
	do(chromedp.Click(chromedp.ID("confirm")), visible("outcome"), shot("redrive-done"))
	require.Contains(t, text("main"), "resolved: applied")
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM accounts WHERE id = 'p1' AND name = 'poison'`), "the effect exists once")
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM effectively_claims WHERE event_key = $1 AND disposition = 'applied'`, cetest.Key("open-poison")))
	do(chromedp.Navigate(base+"/console/dead-letters"), visible("letters"))
	require.NotContains(t, text("#letters"), "integrity_constraint_violation", "gone from the unresolved letters")
	require.Contains(t, text("#letters caption"), "1 dead letter(s)", "the other letter is still listed")

	// The unknown intent, resolved as sent from the page.
	do(chromedp.Navigate(base+"/console/outbox?state=unknown"), visible("intents"), shot("outbox"),
		chromedp.Navigate(fmt.Sprintf("%s/console/outbox/%d", base, intentID)), visible("resolve-sent"), shot("outbox-unknown"))
	require.Contains(t, text("main"), "If the first call did arrive after all, the target receives it twice")
	do(chromedp.Click(chromedp.ID("resolve-sent")), visible("outcome"))
	require.Contains(t, text("#outcome"), "marked sent")
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM outbox WHERE id = $1 AND state = 'sent' AND sent_at IS NOT NULL`, intentID))

	// The replay plan, and its execution refused while the worker runs.
	positions := func() string {
		var s string
		require.NoError(t, r.db.Pool.QueryRow(ctx, `SELECT coalesce(string_agg("partition" || ':' || next_offset, ',' ORDER BY "partition"), '') FROM consumer_offsets WHERE consumer_group = $1`, r.group).Scan(&s))
		return s
	}
	before := positions()
	require.NotEmpty(t, before)
	do(chromedp.Navigate(base+"/console/replay?mode=from_start&topic="+r.topic+"&group="+r.group), visible("plan-table"), shot("replay-plan"))
	require.Contains(t, text("#plan-table"), "record(s) to reprocess")
	require.Contains(t, text("#members-note"), "Execution will be refused")
	do(chromedp.Click(chromedp.ID("execute")), visible("outcome"), shot("replay-refused"))
	require.Contains(t, text("#outcome"), "refused")
	require.Equal(t, before, positions(), "the refused rewind moved nothing")

	// The parked entry, dropped from the page with a reason: a dead letter
	// with reason dropped, carrying it.
	do(chromedp.Navigate(base+"/console/parked?resource=ghost"), visible("drop"), shot("parked"),
		chromedp.SendKeys(chromedp.ID("drop-reason"), "the account was never opened"), chromedp.Click(chromedp.ID("drop")),
		visible("consequence"))
	require.Contains(t, text("#consequence"), "dead letter with reason dropped")
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM parked_events WHERE state = 'parked'`), "the confirmation does nothing")
	do(chromedp.Click(chromedp.ID("confirm")), visible("outcome"))
	require.Contains(t, text("#outcome"), "1 parked events dead-lettered")
	require.Zero(t, r.db.Count(t, `SELECT count(*) FROM parked_events WHERE state = 'parked'`))
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'dropped' AND error LIKE '%the account was never opened%'`))

	// The audit and the action log.
	do(chromedp.Navigate(base+"/console/audit?run=1&topic="+r.topic), visible("audit-counts"), shot("audit"),
		chromedp.Navigate(base+"/console/actions"), visible("actions"), shot("actions"))
	log := text("#actions")
	for _, want := range []string{"dlq.redrive", "outbox.resolve.sent", "replay.execute", "refused", "parked.drop", "alice"} {
		require.Contains(t, log, want)
	}
	require.Equal(t, int64(4), r.db.Count(t, `SELECT count(*) FROM operator_actions WHERE operator = 'alice'`))
	code, out, stderr := runCmd(t, r.env, "actions")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "replay.execute")
	require.Contains(t, out, "4 actions")

	// A forged cross-site POST: a page on another origin submits a form to
	// the console in the signed-in browser. Refused; the dead letter it
	// aimed at is untouched.
	attempts := r.db.Count(t, `SELECT attempts FROM dead_letters WHERE id = $1`, junkID)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/console/dead-letters/redrive">
<input name="id" value="%d"><input name="confirm" value="yes"><input name="csrf" value="guessed"></form>
<script>document.getElementById('f').submit()</script>`, base, junkID)
	}))
	defer evil.Close()
	do(chromedp.Navigate(evil.URL))
	_, err = chromedp.Run(bctx, chromedp.Poll[bool](`document.location.href.includes('/console/')`, chromedp.WithPollingTimeout(30*time.Second)))
	require.NoError(t, err)
	landed := text("body")
	require.Contains(t, landed, "cross-origin request refused")
	require.Equal(t, attempts, r.db.Count(t, `SELECT attempts FROM dead_letters WHERE id = $1`, junkID), "the forged redrive did nothing")
	require.Equal(t, int64(4), r.db.Count(t, `SELECT count(*) FROM operator_actions`))

	// The same with a signed-in Go client: a foreign Origin is refused, and
	// so is a same-origin POST without the session's CSRF token.
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar}
	resp, err = client.PostForm(base+"/console/login", url.Values{"token": {consoleToken}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	form := url.Values{"id": {fmt.Sprint(junkID)}, "confirm": {"yes"}}
	req, err := http.NewRequest(http.MethodPost, base+"/console/dead-letters/redrive", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	resp, err = client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a foreign Origin")
	resp, err = client.PostForm(base+"/console/dead-letters/redrive", form)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token: %s", body)
	require.Equal(t, attempts, r.db.Count(t, `SELECT attempts FROM dead_letters WHERE id = $1`, junkID))
	require.Equal(t, int64(4), r.db.Count(t, `SELECT count(*) FROM operator_actions`))

	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute), tail(w.stderr.String(), 20))
}

// findBrowser finds the Chromium chromedp would start.
func findBrowser() (string, error) {
	if p := os.Getenv("CHROMEDP_EXEC_PATH"); p != "" {
		return p, nil
	}
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(b); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium or Chrome on PATH")
}

// `effectively console` serves the same console without a worker: refused
// without a token (exit 2, naming the keys), or without one on a
// non-loopback address; with a token file, every page asks for it, the
// session cookie is Secure with console.cookie_secure, a sign-in's next
// stays on the console, and failed sign-ins are limited.
func TestConsoleCommand(t *testing.T) {
	t.Parallel()
	r := newRig(t, 1)
	addr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	code, _, stderr := runCmd(t, r.env, "console", "--addr", addr)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "console.token_file")
	code, _, stderr = runCmd(t, append(r.env, "EFFECTIVELY_CONSOLE_LOCALHOST_WITHOUT_TOKEN=true"), "console", "--addr", "0.0.0.0:0")
	require.Equal(t, 2, code, stderr)

	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte(consoleToken+"\n"), 0o600))
	// console.cookie_secure: as behind a proxy that terminates TLS.
	p := start(t, append(r.env, "EFFECTIVELY_CONSOLE_TOKEN_FILE="+tokens, "EFFECTIVELY_CONSOLE_COOKIE_SECURE=true"), "console", "--addr", addr)
	waitUntil(t, "the console serves", time.Minute, func(context.Context) bool {
		return strings.Contains(p.stderr.String(), "console at") || p.exited()
	})
	require.False(t, p.exited(), tail(p.stderr.String(), 10))
	base := "http://" + addr
	plain := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := plain.Get(base + "/console/outbox")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	signIn := func(token, next string) *http.Response {
		t.Helper()
		resp, err := plain.PostForm(base+"/console/login", url.Values{"token": {token}, "next": {next}})
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	resp = signIn(consoleToken, "/console/outbox")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/outbox", resp.Header.Get("Location"))
	cookies := resp.Cookies()
	require.Len(t, cookies, 1)
	session := cookies[0]
	require.True(t, session.Secure, "console.cookie_secure")
	require.True(t, session.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, session.SameSite)
	req, err := http.NewRequest(http.MethodGet, base+"/console/outbox", nil)
	require.NoError(t, err)
	req.AddCookie(session) // by hand: a cookie jar sends a Secure cookie over https only
	resp, err = plain.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `id="operator">operator<`, "a lone token's operator")
	require.Contains(t, string(body), "No intent")

	// next never leads off the console, however spelled.
	for _, next := range []string{`/console/../\evil.example`, `/console/..\\evil.example`, "/console/%2F%2Fevil.example", "/console/%5Cevil.example",
		"/console//evil.example", "//evil.example", "https://evil.example/", "/console/../../evil.example"} {
		resp = signIn(consoleToken, next)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, next)
		require.Equal(t, "/console/", resp.Header.Get("Location"), next)
	}

	// Failed sign-ins are limited: ten from this address, then 429 with
	// Retry-After, the right token included (it is not checked).
	for i := range 10 {
		require.Equal(t, http.StatusUnauthorized, signIn("not-the-token-0123456789", "").StatusCode, "failure %d", i+1)
	}
	resp = signIn("not-the-token-0123456789", "")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	resp = signIn(consoleToken, "")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Empty(t, resp.Cookies())
	p.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, p.wait(t, time.Minute), tail(p.stderr.String(), 10))
}

// rebindingAttack is what a page of the attacker's runs once its name
// resolves to 127.0.0.1 (DNS rebinding): same-origin with whatever answers
// there, it reads an outbox intent's page for the CSRF token and posts the
// resolve form with it. It returns the two statuses and whether a token was
// found.
const rebindingAttack = `(async () => {
	const page = await fetch('/console/outbox/%[1]d');
	const m = (await page.text()).match(/name="csrf" value="([^"]+)"/);
	const post = await fetch('/console/outbox/%[1]d/resolve', {method: 'POST', body: new URLSearchParams({csrf: m ? m[1] : '', action: 'sent'})});
	return {page: page.status, csrf: !!m, post: post.status};
})()`

// rebindingResult is rebindingAttack's result.
type rebindingResult struct {
	Page int  `json:"page"`
	CSRF bool `json:"csrf"`
	Post int  `json:"post"`
}

// The console without a token on a loopback address, attacked through DNS
// rebinding in real headless Chromium: the browser resolves evil.test to
// 127.0.0.1 (as the attacker's DNS would, after serving the page), and the
// attacker's script, same-origin with the console under that name, tries
// to read the CSRF token and resolve an intent. Every request is refused
// with 421 and nothing changes; the same script from localhost does the
// action (so the attack is real), and a name in console.allowed_hosts is
// served. Hostile spellings of Host from a plain client are refused too.
func TestConsoleRefusesRebinding(t *testing.T) {
	t.Parallel()
	if _, err := findBrowser(); err != nil {
		t.Fatalf("%v; fix: apt-get install -y chromium (make test runs test/ensure-chromium.sh)", err)
	}
	r := newRig(t, 1)
	ctx := context.Background()
	intent := func(key string) int64 {
		var id int64
		require.NoError(t, r.db.Pool.QueryRow(ctx, `INSERT INTO outbox (event_key, operation, resource, method, target, request, idempotency_key, idempotent, state, attempts, last_error)
VALUES ($1, 'notify.welcome', 'c1', 'POST', 'https://notify.example/send', '{}', $1, false, 'unknown', 1, 'in doubt') RETURNING id`, cetest.Key(key)).Scan(&id))
		return id
	}
	state := func(id int64) string {
		var s string
		require.NoError(t, r.db.Pool.QueryRow(ctx, `SELECT state FROM outbox WHERE id = $1`, id).Scan(&s))
		return s
	}
	attacked, control := intent("attacked"), intent("control")

	port := proctest.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p := start(t, append(r.env, "EFFECTIVELY_CONSOLE_LOCALHOST_WITHOUT_TOKEN=true", "EFFECTIVELY_CONSOLE_ALLOWED_HOSTS=console.test"), "console", "--addr", addr)
	waitUntil(t, "the console serves", time.Minute, func(context.Context) bool {
		return strings.Contains(p.stderr.String(), "console at") || p.exited()
	})
	require.False(t, p.exited(), tail(p.stderr.String(), 10))

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("host-resolver-rules", "MAP evil.test 127.0.0.1, MAP console.test 127.0.0.1"))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	_, err := chromedp.Run(bctx, chromedp.Title())
	require.NoError(t, err)
	// page is what the browser shows at url.
	page := func(url string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, time.Minute)
		defer cancel()
		require.NoError(t, chromedp.Do(sctx, chromedp.Navigate(url)))
		body, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS("body")))
		require.NoError(t, err)
		return body
	}
	// attack runs the attacker's script in a document of origin. The
	// document is the command's 404 outside /console/: like the attacker's
	// own page it carries no console CSP (which would block the script's
	// fetches).
	attack := func(origin string, id int64) rebindingResult {
		t.Helper()
		require.Contains(t, page(origin+"/the-attackers-page"), "404 page not found")
		sctx, cancel := context.WithTimeout(bctx, time.Minute)
		defer cancel()
		res, err := chromedp.Run(sctx, chromedp.Evaluate[rebindingResult](fmt.Sprintf(rebindingAttack, id), chromedp.EvalAwaitPromise))
		require.NoError(t, err)
		return res
	}

	evil := fmt.Sprintf("http://evil.test:%d", port)
	body := page(evil + "/console/")
	require.Contains(t, body, "is not one this console answers to", "the console under the rebound name")
	require.Contains(t, body, "console.allowed_hosts")
	require.NotContains(t, body, "Overview")
	res := attack(evil, attacked)
	require.Equal(t, rebindingResult{Page: http.StatusMisdirectedRequest, CSRF: false, Post: http.StatusMisdirectedRequest}, res)
	require.Equal(t, "unknown", state(attacked), "the attack changed nothing")
	require.Zero(t, r.db.Count(t, `SELECT count(*) FROM operator_actions`))

	// The same script on localhost: the operator's own origin, which can.
	local := fmt.Sprintf("http://localhost:%d", port)
	require.Contains(t, page(local+"/console/"), "Signed in as localhost")
	res = attack(local, control)
	require.Equal(t, rebindingResult{Page: http.StatusOK, CSRF: true, Post: http.StatusOK}, res)
	require.Equal(t, "sent", state(control))
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM operator_actions WHERE operator = 'localhost' AND action = 'outbox.resolve.sent'`))
	require.Equal(t, "unknown", state(attacked))

	// A name in console.allowed_hosts is served.
	sctx, cancel := context.WithTimeout(bctx, time.Minute)
	defer cancel()
	require.NoError(t, chromedp.Do(sctx, chromedp.Navigate(fmt.Sprintf("http://console.test:%d/console/outbox", port)), chromedp.WaitVisible(chromedp.ID("operator"))))

	// Spellings of Host, from a plain client, on the real server.
	for host, want := range map[string]int{
		fmt.Sprintf("localhost:%d", port): http.StatusOK, fmt.Sprintf("LOCALHOST:%d", port): http.StatusOK,
		fmt.Sprintf("[::1]:%d", port): http.StatusOK, fmt.Sprintf("127.0.0.1:%d", port): http.StatusOK,
		"console.test": http.StatusOK, "CONSOLE.TEST:8443": http.StatusOK,
		fmt.Sprintf("evil.test:%d", port): http.StatusMisdirectedRequest, fmt.Sprintf("localhost.:%d", port): http.StatusMisdirectedRequest,
		fmt.Sprintf("localhost:%d", port+1): http.StatusMisdirectedRequest, "localhost": http.StatusMisdirectedRequest,
		fmt.Sprintf("[::1]:%d", port+1): http.StatusMisdirectedRequest, "console.test.": http.StatusMisdirectedRequest,
		fmt.Sprintf("localhost.evil.test:%d", port): http.StatusMisdirectedRequest, fmt.Sprintf("127.0.0.1.nip.io:%d", port): http.StatusMisdirectedRequest,
	} {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/console/outbox", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "Host %q", host)
	}
	p.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, p.wait(t, time.Minute), tail(p.stderr.String(), 10))
	require.Contains(t, p.stderr.String(), "refused a request for another host", "logged (once a minute at most)")
	require.Equal(t, 1, strings.Count(p.stderr.String(), "refused a request for another host"))
}
