package outbox

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// redirectTo answers code with a Location on elsewhere.
func redirectTo(code int, elsewhere string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Location", elsewhere+"/stolen")
		w.WriteHeader(code)
	}
}

// A redirect is never followed: a 302 would turn a notification's POST into
// a GET whose 2xx records it as sent although none was sent; a 307 would carry
// the body and the idempotency key to another host. Either is dead-lettered
// with the status and the Location, and the other host receives nothing.
func TestRedirectIsDeadLetteredNotFollowed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		code   int
		intent func(url, eventKey, invoice string) Intent
		op     string
	}{
		{"notification 302", http.StatusFound, mailIntent, "chat.welcome"},
		{"notification 301", http.StatusMovedPermanently, mailIntent, "chat.welcome"},
		{"notification 303", http.StatusSeeOther, mailIntent, "chat.welcome"},
		{"idempotent 307", http.StatusTemporaryRedirect, crmIntent, "erp.upsert_contact"},
		{"idempotent 308", http.StatusPermanentRedirect, crmIntent, "erp.upsert_contact"},
		{"notification 307", http.StatusTemporaryRedirect, mailIntent, "chat.welcome"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			elsewhere := newServer(t, status(200))
			target := newServer(t, redirectTo(tc.code, elsewhere.URL))
			b.record(t, tc.intent(target.URL, "ev-1", "acct-1"))

			n, err := b.d.DeliverOnce(b.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			st, _, last, lastErr := b.state(t, "ev-1", tc.op)
			require.Equal(t, "dead_lettered", st)
			require.Equal(t, tc.code, *last)
			require.Contains(t, *lastErr, elsewhere.URL+"/stolen", "the Location is kept")
			require.Contains(t, *lastErr, "redirects are not followed")
			require.Len(t, target.requests(), 1)
			require.Empty(t, elsewhere.requests(), "the other host receives nothing")

			n, err = b.d.DeliverOnce(b.ctx)
			require.NoError(t, err)
			require.Zero(t, n, "a dead-lettered intent is not retried")
		})
	}
}

// A client the caller brings gets no redirects either.
func TestRedirectNotFollowedWithCallersClient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	follows := &http.Client{Timeout: 2 * time.Second} // the default policy follows up to 10
	b.d = NewDispatcher(b.db.Pool, Options{HTTPClient: follows, Timeout: 2 * time.Second})
	elsewhere := newServer(t, status(200))
	target := newServer(t, redirectTo(http.StatusFound, elsewhere.URL))
	b.record(t, mailIntent(target.URL, "ev-1", "acct-1"))

	_, err := b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	st, _, _, _ := b.state(t, "ev-1", "chat.welcome")
	require.Equal(t, "dead_lettered", st)
	require.Empty(t, elsewhere.requests())
	require.Nil(t, follows.CheckRedirect, "the caller's client is not changed")
}

// An intent whose target keeps answering 503 is dead-lettered after
// MaxAttempts with its last status and error, and its resource's next
// intent is then delivered.
func TestAlwaysUnavailableIsDeadLetteredAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.d = NewDispatcher(b.db.Pool, Options{Timeout: 2 * time.Second, RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond, MaxAttempts: 3})
	down := newServer(t, func(w http.ResponseWriter) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "maintenance")
	})
	up := newServer(t, status(200))
	first := crmIntent(down.URL, "ev-1", "acct-1")
	second := crmIntent(up.URL, "ev-2", "acct-1") // same resource, later
	note := mailIntent(down.URL, "ev-1", "acct-1")
	b.record(t, first, note)
	b.record(t, second)

	b.deliverUntil(t, 10*time.Second)
	st, attempts, last, lastErr := b.state(t, "ev-1", "erp.upsert_contact")
	require.Equal(t, "dead_lettered", st)
	require.Equal(t, 3, attempts)
	require.Equal(t, 503, *last)
	require.Contains(t, *lastErr, "gave up after 3 attempts (outbox.max_attempts)")
	require.Contains(t, *lastErr, "503 Service Unavailable: maintenance")

	// A 503 refused the notification before processing it: retried like the
	// idempotent call, and dead-lettered the same way (never unknown).
	st, attempts, last, _ = b.state(t, "ev-1", "chat.welcome")
	require.Equal(t, "dead_lettered", st)
	require.Equal(t, 3, attempts)
	require.Equal(t, 503, *last)
	require.Len(t, down.requests(), 6)

	st, _, _, _ = b.state(t, "ev-2", "erp.upsert_contact")
	require.Equal(t, "sent", st, "the resource's later intent is no longer held back")

	// An operator retries it once the target answers: attempts restart.
	n, err := Retry(b.ctx, b.db.Pool, Filter{State: DeadLettered}, b.id(t, "ev-1", "erp.upsert_contact"))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, attempts, _, _ = b.state(t, "ev-1", "erp.upsert_contact")
	require.Zero(t, attempts)
}

// Connection refused counts the same way; and an intent older than MaxAge
// is dead-lettered at its next failure.
func TestRefusedPastMaxAgeIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.d = NewDispatcher(b.db.Pool, Options{Timeout: 2 * time.Second, RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond, MaxAge: time.Hour})
	gone := newServer(t, status(200))
	url := gone.URL
	gone.Close() // connection refused from now on
	b.record(t, mailIntent(url, "ev-1", "acct-1"))

	_, err := b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	st, _, _, _ := b.state(t, "ev-1", "chat.welcome")
	require.Equal(t, "pending", st, "young: retried")

	_, err = b.db.Pool.Exec(b.ctx, `UPDATE outbox SET created_at = now() - interval '2 hours', next_attempt_at = now()`)
	require.NoError(t, err)
	_, err = b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	st, attempts, last, lastErr := b.state(t, "ev-1", "chat.welcome")
	require.Equal(t, "dead_lettered", st)
	require.Equal(t, 2, attempts)
	require.Nil(t, last)
	require.Contains(t, *lastErr, "(outbox.max_age)")
	require.Contains(t, *lastErr, "connection refused")
}

// A huge answer is read up to MaxResponseBytes, never whole, and only an
// excerpt is kept.
func TestLargeResponseBodyIsCut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sentAll := make(chan bool, 1)
	erp := newServer(t, func(w http.ResponseWriter) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		chunk := []byte(strings.Repeat("y", 32<<10))
		for i := 0; i < 32*16; i++ { // 16 MiB
			if _, err := w.Write(chunk); err != nil {
				sentAll <- false
				return
			}
		}
		sentAll <- true
	})
	b.record(t, crmIntent(erp.URL, "ev-1", "acct-1"))

	_, err := b.d.DeliverOnce(b.ctx)
	require.NoError(t, err)
	st, _, last, lastErr := b.state(t, "ev-1", "erp.upsert_contact")
	require.Equal(t, "dead_lettered", st)
	require.Equal(t, 422, *last)
	require.Less(t, len(*lastErr), 1024)
	require.False(t, <-sentAll, "the dispatcher closed the connection instead of reading 16 MiB")
}
