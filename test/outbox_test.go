package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/internal/crashpoint"
	"github.com/effectively-io/effectively/internal/outbox"
)

// effectsServer is a local CRM or mail API that counts what it receives.
type effectsServer struct {
	mu sync.Mutex
	// keys: idempotency key → requests carrying it.
	keys map[string]int
	// keysByAccount: account → the distinct idempotency keys it came with.
	keysByAccount map[string]map[string]bool
	// accepted: account → requests answered 2xx; received: → all requests.
	accepted, received map[string]int
	// reply chooses the status of a request: n is how many requests this
	// account has sent so far, this one included. Nil: 200.
	reply func(account string, n int, h http.Header) int
	// midCall, when set, is called once (then cleared) after a request is
	// counted and before it is answered: a crash during delivery.
	midCall func()
	// overflow records an account that received a second request when it
	// must never (the mail API).
	overflow   []string
	atMostOnce bool
}

func newEffectsServer(t *testing.T, atMostOnce bool, reply func(account string, n int, h http.Header) int) (*effectsServer, string) {
	t.Helper()
	s := &effectsServer{keys: map[string]int{}, keysByAccount: map[string]map[string]bool{},
		accepted: map[string]int{}, received: map[string]int{}, reply: reply, atMostOnce: atMostOnce}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// account is the account a CRM or mail request is about: the CRM's path
// /contacts/<id>, the mail's account_id.
func requestAccount(r *http.Request, body []byte) string {
	if id, ok := strings.CutPrefix(r.URL.Path, "/contacts/"); ok {
		return id
	}
	var m struct {
		AccountID string `json:"account_id"`
	}
	_ = json.Unmarshal(body, &m)
	return m.AccountID
}

func (s *effectsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	acct := requestAccount(r, body)
	s.mu.Lock()
	k := r.Header.Get("Idempotency-Key")
	s.keys[k]++
	if s.keysByAccount[acct] == nil {
		s.keysByAccount[acct] = map[string]bool{}
	}
	s.keysByAccount[acct][k] = true
	s.received[acct]++
	n := s.received[acct]
	if s.atMostOnce && n > 1 {
		s.overflow = append(s.overflow, acct)
	}
	status := http.StatusOK
	if s.reply != nil {
		status = s.reply(acct, n, w.Header())
	}
	midCall := s.midCall
	s.midCall = nil
	if status/100 == 2 {
		s.accepted[acct]++
	}
	s.mu.Unlock()
	if midCall != nil {
		midCall()
		time.Sleep(200 * time.Millisecond) // the caller is gone
	}
	w.WriteHeader(status)
}

// armMidCall makes the next request run fn before it is answered.
func (s *effectsServer) armMidCall(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.midCall = fn
}

func (s *effectsServer) disarm() (wasArmed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wasArmed = s.midCall != nil
	s.midCall = nil
	return wasArmed
}

// effectsSnapshot is what a server has received.
type effectsSnapshot struct {
	Keys          map[string]int
	KeysByAccount map[string]int // account → distinct idempotency keys
	Accepted      map[string]int
	Received      map[string]int
	Overflow      []string
}

func (s *effectsServer) snapshot() effectsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := effectsSnapshot{Keys: map[string]int{}, KeysByAccount: map[string]int{}, Accepted: map[string]int{},
		Received: map[string]int{}, Overflow: append([]string(nil), s.overflow...)}
	for k, v := range s.keys {
		out.Keys[k] = v
	}
	for a, ks := range s.keysByAccount {
		out.KeysByAccount[a] = len(ks)
	}
	for a, v := range s.accepted {
		out.Accepted[a] = v
	}
	for a, v := range s.received {
		out.Received[a] = v
	}
	return out
}

// requests is how many requests the server received.
func (s effectsSnapshot) requests() int {
	n := 0
	for _, v := range s.Received {
		n += v
	}
	return n
}

// openedAccounts are the accounts whose account.opened the workload emits.
func openedAccounts(exp workload.Expected) []string {
	out := make([]string, 0, len(exp.Accounts))
	for id := range exp.Accounts {
		out = append(out, id)
	}
	return out
}

// requireCRMOncePerAccount: every opened account's contact reached the CRM
// (a 2xx), under exactly one idempotency key per account, and the distinct
// keys are as many as the opened accounts.
func requireCRMOncePerAccount(t *testing.T, crm effectsSnapshot, opened []string) {
	t.Helper()
	keys := 0
	for k := range crm.Keys {
		if k == "" {
			t.Errorf("a CRM request without an Idempotency-Key")
			continue
		}
		keys++
	}
	require.Equal(t, len(opened), keys, "distinct CRM idempotency keys = opened accounts")
	for _, a := range opened {
		require.Equal(t, 1, crm.KeysByAccount[a], "account %s: one idempotency key, however often it was retried", a)
		require.GreaterOrEqual(t, crm.Accepted[a], 1, "account %s reached the CRM", a)
	}
	require.Len(t, crm.KeysByAccount, len(opened), "no CRM call for an account that was not opened")
}

// outboxIntents lists intents through the CLI, as an operator would.
func (r *rig) outboxIntents(t *testing.T, args ...string) []outbox.Stored {
	t.Helper()
	code, out, stderr := runCmd(t, r.env, append([]string{"outbox", "list", "--json"}, args...)...)
	require.Equal(t, 0, code, stderr)
	var got struct {
		Intents []outbox.Stored `json:"intents"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	return got.Intents
}

// settleMailsInDoubt does what the runbook asks of an operator after a
// crash left welcome mails unknown: each is checked against the mail API's
// log (received is mails by account) and settled, --sent when it arrived,
// --resend when it did not, many IDs to one `outbox resolve`. It returns how
// many were marked sent and how many queued again.
func settleMailsInDoubt(t *testing.T, env []string, unknown []outbox.Stored, received map[string]int) (sent, resent int) {
	t.Helper()
	ids := map[string][]string{}
	for _, in := range unknown {
		how := "--resend"
		if received[strings.TrimPrefix(in.Resource, "mail:account:")] > 0 {
			how = "--sent"
		}
		ids[how] = append(ids[how], strconv.FormatInt(in.ID, 10))
	}
	for how, batch := range ids {
		code, out, stderr := runCmd(t, env, append([]string{"outbox", "resolve", how}, batch...)...)
		require.Equal(t, 0, code, stderr)
		require.Equal(t, len(batch), strings.Count(out, "\n"), "one line per settled intent: %s", out)
	}
	return len(ids["--sent"]), len(ids["--resend"])
}

// Side effects of account.opened leave through the outbox, end to end: the
// CRM sees one idempotency key per opened account whatever it answers (a
// 500 then 200, a 429 with Retry-After then 200: retried with the same key;
// a 400: the intent is dead-lettered with the status, listed, and delivered
// by `outbox retry` once the CRM is fixed); the mail API exactly one welcome
// mail per account; and producing every event twice more sends nothing more
// to either.
func TestSideEffectsLeaveOnce(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		rejected string // the account the CRM refuses with a 400 until fixed
		fixed    bool
	)
	crm, crmURL := newEffectsServer(t, false, func(acct string, n int, h http.Header) int {
		mu.Lock()
		defer mu.Unlock()
		if rejected == "" {
			rejected = acct
		}
		if acct == rejected && !fixed {
			return http.StatusBadRequest
		}
		id, _ := strconv.Atoi(strings.TrimLeft(strings.TrimPrefix(acct, "acct-"), "0"))
		switch {
		case id%3 == 0 && n == 1:
			return http.StatusInternalServerError
		case id%3 == 1 && n == 1:
			h.Set("Retry-After", "1")
			return http.StatusTooManyRequests
		}
		return http.StatusOK
	})
	mail, mailURL := newEffectsServer(t, true, nil)
	r := newRig(t, 3, "EFFECTIVELY_TARGETS_CRM_URL="+crmURL, "EFFECTIVELY_TARGETS_MAIL_URL="+mailURL+"/welcome",
		"EFFECTIVELY_RETRY_INITIAL=50ms", "EFFECTIVELY_RETRY_MAX=500ms")
	cfg := workload.Config{Accounts: 60, Events: 1500, Duplicates: 0.1, OutOfOrder: 0.1, Seed: 41}
	exp := r.produce(t, cfg)
	opened := openedAccounts(exp)
	require.Len(t, opened, exp.ByType[workload.TypeAccountOpened])
	w := r.worker(t)
	r.waitApplied(t, exp.Records, 2*time.Minute)
	settled := func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM outbox WHERE state IN ('pending', 'sending')`) == 0 &&
			r.db.Count(t, `SELECT count(*) FROM outbox`) == int64(2*len(opened))
	}
	waitUntil(t, "the outbox settled", time.Minute, settled)

	// The 400: dead-lettered with its status, not retried.
	dead := r.outboxIntents(t, "--state", "dead_lettered")
	require.Len(t, dead, 1)
	require.Equal(t, accounts.OpCRMUpsertContact, dead[0].Operation)
	require.Equal(t, "crm:contact:"+rejected, dead[0].Resource)
	require.Equal(t, 400, *dead[0].LastStatus)
	require.Contains(t, dead[0].LastError, "400 Bad Request")
	require.Equal(t, 1, crm.snapshot().Received[rejected], "a 400 is not retried")
	retryAfter := r.outboxIntents(t, "--operation", accounts.OpCRMUpsertContact)
	for _, in := range retryAfter {
		id, _ := strconv.Atoi(strings.TrimLeft(strings.TrimPrefix(strings.TrimPrefix(in.Resource, "crm:contact:"), "acct-"), "0"))
		if id%3 == 1 && in.State == outbox.Sent && in.Resource != "crm:contact:"+rejected {
			require.GreaterOrEqual(t, in.SentAt.Sub(in.CreatedAt), time.Second, "%s: the 429's Retry-After: 1 was honoured", in.Resource)
		}
	}

	// Fixed: the operator retries it; it leaves once, with the same key.
	mu.Lock()
	fixed = true
	mu.Unlock()
	code, out, stderr := runCmd(t, r.env, "outbox", "retry", strconv.FormatInt(dead[0].ID, 10))
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "1 intents queued")
	waitUntil(t, "the retried intent sent", time.Minute, func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM outbox WHERE state = 'sent'`) == int64(2*len(opened))
	})

	check := func() effectsSnapshot {
		t.Helper()
		c := crm.snapshot()
		requireCRMOncePerAccount(t, c, opened)
		for _, a := range opened {
			id, _ := strconv.Atoi(strings.TrimLeft(strings.TrimPrefix(a, "acct-"), "0"))
			switch {
			case a == rejected:
				require.Equal(t, 2, c.Received[a], "%s: the 400, then the retry", a)
			case id%3 == 0 || id%3 == 1:
				require.Equal(t, 2, c.Received[a], "%s: the 500 or 429, then one retry with the same key", a)
			default:
				require.Equal(t, 1, c.Received[a], a)
			}
		}
		m := mail.snapshot()
		require.Empty(t, m.Overflow, "a second welcome mail")
		require.Equal(t, map[string]int{"": len(opened)}, m.Keys, "no idempotency key on mail: its API has none")
		for _, a := range opened {
			require.Equal(t, 1, m.Accepted[a], "exactly one welcome mail for %s", a)
		}
		return c
	}
	before := check()

	// Every event twice more: all duplicates, nothing more leaves.
	r.produce(t, cfg)
	r.produce(t, cfg)
	r.waitApplied(t, 3*exp.Records, 2*time.Minute)
	time.Sleep(2 * time.Second) // dispatcher rounds
	after := check()
	require.Equal(t, before, after, "a replay sent something")
	require.Equal(t, int64(2*len(opened)), r.db.Count(t, `SELECT count(*) FROM outbox`), "a replay recorded an intent")
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	r.verify(t, exp)
}

// Kill -9 of the worker at each step of a side effect, over and over: after
// the effect's commit (intents recorded, Kafka not committed), during the
// call (the server kills the worker after receiving it, before answering),
// after the answer before the outcome is recorded, and (for good measure)
// after the intent is marked sending, before the call. Through ≥ 28 crashes
// the CRM sees one idempotency key per opened account, and the mail API at
// most one mail per account, ever; the mails caught mid-call are unknown,
// listed, and after the operator resolves them (sent when the mail API got
// it, resend when it did not) every account has exactly one.
func TestSideEffectsSurviveAKillLoop(t *testing.T) {
	t.Parallel()
	crm, crmURL := newEffectsServer(t, false, nil)
	mail, mailURL := newEffectsServer(t, true, nil)
	r := newRig(t, 3, "EFFECTIVELY_EFFECTS_CRM_URL="+crmURL, "EFFECTIVELY_EFFECTS_MAIL_URL="+mailURL+"/welcome",
		"EFFECTIVELY_RETRY_INITIAL=50ms", "EFFECTIVELY_RETRY_MAX=500ms",
		"EFFECTIVELY_OUTBOX_CALL_TIMEOUT=2s", "EFFECTIVELY_OUTBOX_LEASE_GRACE=1s", "EFFECTIVELY_OUTBOX_CONCURRENCY=2",
		"EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=10", "EFFECTIVELY_KAFKA_INSTANCE_ID=outbox-kill")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	exp := r.produce(t, workload.Config{Accounts: 90, Events: 2000, Duplicates: 0.1, OutOfOrder: 0.1, Seed: seed})
	opened := openedAccounts(exp)

	const perStep = 7
	const midCall = "mid_call"
	steps := []string{crashpoint.AfterDBCommit, midCall, crashpoint.OutboxAfterCall, crashpoint.OutboxBeforeCall}
	kills := map[string]int{}
	short := func() bool {
		for _, s := range steps {
			if kills[s] < perStep {
				return true
			}
		}
		return false
	}
	for i := 0; i < 100 && short(); i++ {
		step := steps[i%len(steps)]
		if i < 2*perStep && kills[crashpoint.AfterDBCommit] < perStep {
			step = crashpoint.AfterDBCommit // while there is consuming left to crash in
		}
		if kills[step] >= perStep {
			continue
		}
		var w *proc
		if step == midCall {
			w = r.worker(t)
			target := crm
			if rng.IntN(2) == 0 {
				target = mail
			}
			target.armMidCall(func() { _ = w.cmd.Process.Signal(syscall.SIGKILL) })
		} else {
			w = r.worker(t, fmt.Sprintf("%s=%s:%d", crashpoint.EnvVar, step, 1+rng.IntN(2)))
		}
		select {
		case <-w.Done():
		case <-time.After(15 * time.Second):
		}
		crm.disarm()
		mail.disarm()
		if !w.exited() {
			w.signal(t, syscall.SIGTERM) // the step had nothing left to crash in
			require.Equal(t, 0, w.wait(t, time.Minute))
			continue
		}
		ws, ok := w.cmd.ProcessState.Sys().(syscall.WaitStatus)
		require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the worker ended by itself: %v\n%s", w.cmd.ProcessState, tail(w.stderr.String(), 30))
		kills[step]++
		require.Empty(t, mail.snapshot().Overflow, "a second welcome mail after %d crashes", i+1)
	}
	t.Logf("kills by step: %v", kills)
	for _, s := range steps {
		require.GreaterOrEqual(t, kills[s], perStep, "too few crashes at %s", s)
	}

	// A clean worker finishes the work and settles every lease.
	w := r.startedWorker(t)
	r.waitApplied(t, exp.Records, 2*time.Minute)
	waitUntil(t, "the outbox settled", time.Minute, func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM outbox WHERE state IN ('pending', 'sending')`) == 0 &&
			r.db.Count(t, `SELECT count(*) FROM outbox`) == int64(2*len(opened))
	})
	requireCRMOncePerAccount(t, crm.snapshot(), opened)
	m := mail.snapshot()
	require.Empty(t, m.Overflow, "a second welcome mail")

	// The operator settles the unknown mails against the mail API's record.
	unknown := r.outboxIntents(t, "--state", "unknown")
	t.Logf("unknown after the crashes: %d of %d mails", len(unknown), len(opened))
	require.NotEmpty(t, unknown, "the mid-call and after-call kills must leave some mails in doubt")
	for _, in := range unknown {
		require.Equal(t, accounts.OpMailWelcome, in.Operation, "only a call without idempotency becomes unknown")
	}
	// The first one goes in a call with two IDs that cannot be settled (a
	// sent intent, one that does not exist): it is settled all the same,
	// and the call names the other two and fails.
	first, rest := unknown[0], unknown[1:]
	how := "--resend"
	if m.Received[strings.TrimPrefix(first.Resource, "mail:account:")] > 0 {
		how = "--sent"
	}
	done := r.outboxIntents(t, "--state", "sent")
	require.NotEmpty(t, done)
	code, out, stderr := runCmd(t, r.env, "outbox", "resolve", how, strconv.FormatInt(done[0].ID, 10), strconv.FormatInt(first.ID, 10), "999999999", "--json")
	require.Equal(t, 1, code, "two of three could not be settled: %s", stderr)
	var settledJSON struct {
		Settled    []int64             `json:"settled"`
		NotSettled []outbox.NotSettled `json:"not_settled"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &settledJSON), out)
	require.Equal(t, []int64{first.ID}, settledJSON.Settled)
	require.Equal(t, []outbox.NotSettled{{ID: done[0].ID, State: outbox.Sent}, {ID: 999999999}}, settledJSON.NotSettled)
	require.Contains(t, stderr, "2 of 3 intents not settled")
	require.Contains(t, stderr, fmt.Sprintf("outbox intent %d: it is sent", done[0].ID))
	require.Contains(t, stderr, "outbox intent 999999999: no such outbox intent")
	// resolve settles exactly the IDs given: a filter is refused, not ignored.
	code, _, stderr = runCmd(t, r.env, "outbox", "resolve", how, "--resource", first.Resource, strconv.FormatInt(first.ID, 10))
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "--resource does not apply")
	_, resent := settleMailsInDoubt(t, r.env, rest, m.Received)
	if how == "--resend" {
		resent++
	}
	waitUntil(t, "the resent mails delivered", time.Minute, func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM outbox WHERE state = 'sent'`) == int64(2*len(opened))
	})
	m = mail.snapshot()
	require.Empty(t, m.Overflow, "a second welcome mail")
	for _, a := range opened {
		require.Equal(t, 1, m.Received[a], "after resolve, exactly one welcome mail for %s", a)
	}
	t.Logf("%d opened accounts; %d unknown mails resolved (%d resent)", len(opened), len(unknown), resent)
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	r.verify(t, exp)
}
