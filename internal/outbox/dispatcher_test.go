package outbox

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/effectively-io/effectively/internal/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"))
}

// received is one request a test server saw.
type received struct {
	method, path, key, body string
}

// server answers with the next of its replies (the last one repeats) and
// counts what it receives.
type server struct {
	*httptest.Server
	mu      sync.Mutex
	got     []received
	replies []func(w http.ResponseWriter)
}

func newServer(t *testing.T, replies ...func(w http.ResponseWriter)) *server {
	s := &server{replies: replies}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.got = append(s.got, received{r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), string(b)})
		reply := s.replies[min(len(s.got), len(s.replies))-1]
		s.mu.Unlock()
		reply(w)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

func status(code int) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) { w.WriteHeader(code) }
}

type bundle struct {
	db  pgtest.DB
	d   *Dispatcher
	ctx context.Context
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := pgtest.New(t)
	d := NewDispatcher(db.Pool, Options{Timeout: 2 * time.Second, RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond})
	return &bundle{db: db, d: d, ctx: context.Background()}
}

func (b *bundle) record(t *testing.T, intents ...Intent) {
	t.Helper()
	sql, args := Record(intents...)
	_, err := b.db.Pool.Exec(b.ctx, sql, args...)
	require.NoError(t, err)
}

func (b *bundle) state(t *testing.T, eventKey, op string) (state string, attempts int, lastStatus *int, lastErr *string) {
	t.Helper()
	require.NoError(t, b.db.Pool.QueryRow(b.ctx,
		`SELECT state, attempts, last_status, last_error FROM outbox WHERE event_key = $1 AND operation = $2`,
		eventKey, op).Scan(&state, &attempts, &lastStatus, &lastErr))
	return
}

func (b *bundle) id(t *testing.T, eventKey, op string) int64 {
	t.Helper()
	return b.db.Count(t, `SELECT id FROM outbox WHERE event_key = $1 AND operation = $2`, eventKey, op)
}

// deliverUntil delivers until no intent is pending or the deadline passes.
func (b *bundle) deliverUntil(t *testing.T, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := b.d.DeliverOnce(b.ctx)
		require.NoError(t, err)
		return b.db.Count(t, `SELECT count(*) FROM outbox WHERE state IN ('pending', 'sending')`) == 0
	}, within, 5*time.Millisecond)
}

func crmIntent(url, eventKey, invoice string) Intent {
	return Intent{
		EventKey: eventKey, Operation: "erp.upsert_contact", Resource: "erp:contact:" + invoice,
		Method: http.MethodPut, Target: url + "/contacts/" + invoice,
		Request: json.RawMessage(`{"id":"` + invoice + `"}`), Idempotent: true,
	}
}

func mailIntent(url, eventKey, invoice string) Intent {
	return Intent{
		EventKey: eventKey, Operation: "chat.welcome", Resource: "chat:invoice:" + invoice,
		Method: http.MethodPost, Target: url,
		Request: json.RawMessage(`{"to":"` + invoice + `@example.com"}`),
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	k := IdempotencyKey("ev-1", "erp.upsert_contact")
	require.Len(t, k, 32)
	require.Equal(t, k, IdempotencyKey("ev-1", "erp.upsert_contact"))
	require.NotEqual(t, k, IdempotencyKey("ev-1", "chat.welcome"))
	require.NotEqual(t, k, IdempotencyKey("ev-2", "erp.upsert_contact"))
	// The separator keeps the parts apart.
	require.NotEqual(t, IdempotencyKey("a", "bc"), IdempotencyKey("ab", "c"))
}

func TestRecordTwiceIsOneRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.record(t, crmIntent("http://erp", "ev-1", "acct-1"), mailIntent("http://chat", "ev-1", "acct-1"))
	b.record(t, mailIntent("http://chat", "ev-1", "acct-1"), crmIntent("http://erp", "ev-1", "acct-1"))
	require.EqualValues(t, 2, b.db.Count(t, `SELECT count(*) FROM outbox`))
	require.EqualValues(t, 1, b.db.Count(t, `SELECT count(*) FROM outbox WHERE event_key = 'ev-1' AND operation = 'chat.welcome'`))
}

func TestCRMServerErrorThenOKIsOneCallWithOneKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	erp := newServer(t, status(500), status(200))
	b.record(t, crmIntent(erp.URL, "ev-1", "acct-1"))

	n, err := b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	st, attempts, last, _ := b.state(t, "ev-1", "erp.upsert_contact")
	require.Equal(t, "pending", st)
	require.Equal(t, 1, attempts)
	require.Equal(t, 500, *last)

	b.deliverUntil(t, 5*time.Second)
	st, attempts, _, _ = b.state(t, "ev-1", "erp.upsert_contact")
	require.Equal(t, "sent", st)
	require.Equal(t, 2, attempts)
	got := erp.requests()
	require.Len(t, got, 2)
	want := IdempotencyKey("ev-1", "erp.upsert_contact")
	for _, r := range got {
		require.Equal(t, http.MethodPut, r.method)
		require.Equal(t, "/contacts/acct-1", r.path)
		require.Equal(t, want, r.key)
		require.JSONEq(t, `{"id":"acct-1"}`, r.body)
	}
}

func TestCRMTooManyRequestsHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	erp := newServer(t, func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	}, status(204))
	b.record(t, crmIntent(erp.URL, "ev-1", "acct-1"))

	start := time.Now()
	_, err := b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, b.db.Count(t,
		`SELECT count(*) FROM outbox WHERE state = 'pending' AND last_status = 429 AND next_attempt_at > now() + interval '800 milliseconds'`))
	// Not due yet: nothing is claimed, nothing sent.
	n, err := b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Len(t, erp.requests(), 1)

	b.deliverUntil(t, 5*time.Second)
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond)
	got := erp.requests()
	require.Len(t, got, 2)
	require.Equal(t, got[0].key, got[1].key)
	st, _, _, _ := b.state(t, "ev-1", "erp.upsert_contact")
	require.Equal(t, "sent", st)
}

func TestCRMBadRequestIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	erp := newServer(t, func(w http.ResponseWriter) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":"email rejected"}`+strings.Repeat("x", 10000))
	})
	b.record(t, crmIntent(erp.URL, "ev-1", "acct-1"))

	_, err := b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	st, _, last, lastErr := b.state(t, "ev-1", "erp.upsert_contact")
	require.Equal(t, "dead_lettered", st)
	require.Equal(t, 400, *last)
	require.Contains(t, *lastErr, "400 Bad Request")
	require.Contains(t, *lastErr, "email rejected")
	require.Less(t, len(*lastErr), 1024, "the body excerpt is bounded")

	n, err := b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Len(t, erp.requests(), 1)
}

// A target's answer with a NUL and bytes that are not UTF-8 is recorded
// (cleaned), not refused by PostgreSQL: an unrecordable outcome would have
// the intent called again for ever and hold back its resource's later
// intents.
func TestAnswerWithNULIsRecordedAndDoesNotBlockTheResource(t *testing.T) {
	t.Parallel()
	b := setup(t)
	erp := newServer(t, func(w http.ResponseWriter) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = io.WriteString(w, "bad\x00input\xff\xfe")
	}, status(200))
	b.record(t, crmIntent(erp.URL, "ev-1", "acct-1"))
	b.record(t, crmIntent(erp.URL, "ev-2", "acct-1"))

	b.deliverUntil(t, 10*time.Second)
	st, attempts, last, lastErr := b.state(t, "ev-1", "erp.upsert_contact")
	require.Equal(t, "dead_lettered", st)
	require.Equal(t, 1, attempts, "called once, not again and again")
	require.Equal(t, 422, *last)
	require.Contains(t, *lastErr, `bad\0input`)
	st, _, _, _ = b.state(t, "ev-2", "erp.upsert_contact")
	require.Equal(t, "sent", st, "the resource's next intent went out")
	require.Len(t, erp.requests(), 2)
}

func TestResourceOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	erp := newServer(t, status(503), status(200))
	first, second := crmIntent(erp.URL, "ev-1", "acct-1"), crmIntent(erp.URL, "ev-2", "acct-1")
	first.Request, second.Request = json.RawMessage(`{"n":1}`), json.RawMessage(`{"n":2}`)
	b.record(t, first)
	b.record(t, second)

	n, err := b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the second intent waits while the first is pending")
	b.deliverUntil(t, 5*time.Second)
	got := erp.requests()
	require.Len(t, got, 3)
	require.JSONEq(t, `{"n":1}`, got[0].body)
	require.JSONEq(t, `{"n":1}`, got[1].body)
	require.JSONEq(t, `{"n":2}`, got[2].body)
}

// expire simulates the passing of a dead dispatcher's lease.
func (b *bundle) expire(t *testing.T) {
	t.Helper()
	_, err := b.db.Pool.Exec(b.ctx, `UPDATE outbox SET lease_until = now() - interval '1 second' WHERE state = 'sending'`)
	require.NoError(t, err)
}

func TestMailCrashBeforeCallBecomesUnknownAndResendSendsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	chat := newServer(t, status(202))
	b.record(t, mailIntent(chat.URL, "ev-1", "acct-1"))

	// A dispatcher claims the intent (sending, committed) and dies before
	// the call.
	c, err := b.d.claim(b.ctx)
	require.NoError(t, err)
	require.Len(t, c, 1)
	st, _, _, _ := b.state(t, "ev-1", "chat.welcome")
	require.Equal(t, "sending", st)

	// While the lease holds, nobody else touches it.
	n, err := b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	b.expire(t)
	restarted := NewDispatcher(b.db.Pool, Options{RetryInitial: time.Millisecond})
	for range 3 {
		n, err = restarted.DeliverOnce(b.ctx)
		require.NoError(t, err)
		require.Zero(t, n)
	}
	st, _, _, _ = b.state(t, "ev-1", "chat.welcome")
	require.Equal(t, "unknown", st)
	require.Empty(t, chat.requests(), "an unknown chat is never re-sent automatically")

	id := b.id(t, "ev-1", "chat.welcome")
	require.NoError(t, Resolve(b.ctx, b.db.Pool, id, ResolveResend))
	b.deliverUntil(t, 5*time.Second)
	for range 3 {
		_, err = restarted.DeliverOnce(b.ctx)
		require.NoError(t, err)
	}
	require.Len(t, chat.requests(), 1, "resend sends exactly one chat")
	require.Empty(t, chat.requests()[0].key, "no Idempotency-Key: net/http would replay such a request itself")
	st, _, _, _ = b.state(t, "ev-1", "chat.welcome")
	require.Equal(t, "sent", st)

	require.ErrorIs(t, Resolve(b.ctx, b.db.Pool, id, ResolveResend), ErrNotUnknown)
	require.ErrorIs(t, Resolve(b.ctx, b.db.Pool, id+1000, ResolveSent), ErrNotFound)
	require.Error(t, Resolve(b.ctx, b.db.Pool, id, "maybe"))
}

func TestMailCrashAfterCallBeforeRecordIsUnknownThenResolvedSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	chat := newServer(t, status(202))
	b.record(t, mailIntent(chat.URL, "ev-1", "acct-1"))

	c, err := b.d.claim(b.ctx)
	require.NoError(t, err)
	require.Len(t, c, 1)
	o := b.d.call(b.ctx, c[0]) // the chat leaves; the dispatcher dies before recording it
	require.Equal(t, Sent, o.state)
	require.Len(t, chat.requests(), 1)

	b.expire(t)
	_, err = b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	st, _, _, _ := b.state(t, "ev-1", "chat.welcome")
	require.Equal(t, "unknown", st)
	require.NoError(t, Resolve(b.ctx, b.db.Pool, b.id(t, "ev-1", "chat.welcome"), ResolveSent))
	for range 3 {
		_, err = b.d.DeliverOnce(b.ctx)
		require.NoError(t, err)
	}
	require.Len(t, chat.requests(), 1, "at most one chat, ever")
	st, _, _, _ = b.state(t, "ev-1", "chat.welcome")
	require.Equal(t, "sent", st)
}

func TestMailServerErrorIsUnknownNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	chat := newServer(t, status(500))
	b.record(t, mailIntent(chat.URL, "ev-1", "acct-1"))
	for range 3 {
		_, err := b.d.DeliverOnce(b.ctx)
		require.NoError(t, err)
		time.Sleep(10 * time.Millisecond)
	}
	require.Len(t, chat.requests(), 1)
	st, _, last, _ := b.state(t, "ev-1", "chat.welcome")
	require.Equal(t, "unknown", st)
	require.Equal(t, 500, *last)
}

func TestUnknownDoesNotBlockLaterIntents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	chat := newServer(t, status(500), status(202))
	b.record(t, mailIntent(chat.URL, "ev-1", "acct-1"))
	b.record(t, mailIntent(chat.URL, "ev-2", "acct-1"))
	b.deliverUntil(t, 5*time.Second)
	require.Len(t, chat.requests(), 2)
	st, _, _, _ := b.state(t, "ev-2", "chat.welcome")
	require.Equal(t, "sent", st)
}

func TestRunDeliversAndStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	erp := newServer(t, status(200))
	b.record(t, crmIntent(erp.URL, "ev-1", "acct-1"))
	d := NewDispatcher(b.db.Pool, Options{Interval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	require.Eventually(t, func() bool { return len(erp.requests()) == 1 }, 5*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	st, _, _, _ := b.state(t, "ev-1", "erp.upsert_contact")
	require.Equal(t, "sent", st)
}
