package test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/internal/audit"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

// effectSnapshot is what reprocessing must not change: the effect tables
// and the side effects that left.
type effectSnapshot struct {
	Accounts, LedgerEntries, Balances string
	SentIntents                       string
	Sent                              int64
}

func snapshotEffects(t *testing.T, r *rig) effectSnapshot {
	t.Helper()
	ctx := context.Background()
	d, err := workload.StateDigest(ctx, r.db.Pool)
	require.NoError(t, err)
	rows, err := r.db.Pool.Query(ctx, `SELECT event_key, operation, idempotency_key, request::text FROM outbox WHERE state = 'sent' ORDER BY event_key, operation`)
	require.NoError(t, err)
	defer rows.Close()
	h := sha256.New()
	var n int64
	for rows.Next() {
		var k, op, ik, req string
		require.NoError(t, rows.Scan(&k, &op, &ik, &req))
		fmt.Fprintf(h, "%s\x1f%s\x1f%s\x1f%s\n", k, op, ik, req)
		n++
	}
	require.NoError(t, rows.Err())
	return effectSnapshot{Accounts: d.Accounts, LedgerEntries: d.LedgerEntries, Balances: d.Balances,
		SentIntents: hex.EncodeToString(h.Sum(nil)), Sent: n}
}

// Reprocessing the last 24 hours is a safe operation, tested deliberately.
// A stream whose record timestamps span 48 hours — duplicates, disorder,
// poison in both days, side effects on — is processed; the effect tables
// and the sent intents are snapshotted and the audit is clean. The group is
// rewound 24 h with `effectively replay --since 24h --execute` and a worker
// processes the last day again: the snapshot is unchanged, the local CRM
// and mail servers receive nothing more, the audit is clean. Then every
// claim is pruned (`effectively prune` with a tiny retention) and the same
// rewind runs again: without claims each event of the last day is applied
// anew — and still the snapshot is unchanged and nothing more is sent.
func TestReprocessingTheLast24HoursIsANonEvent(t *testing.T) {
	t.Parallel()
	crm, crmURL := newEffectsServer(t, false, nil)
	mail, mailURL := newEffectsServer(t, true, nil)
	r := newRig(t, 3, "EFFECTIVELY_EFFECTS_CRM_URL="+crmURL, "EFFECTIVELY_EFFECTS_MAIL_URL="+mailURL+"/welcome",
		"EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=100", "EFFECTIVELY_RETRY_INITIAL=50ms", "EFFECTIVELY_RETRY_MAX=500ms",
		"EFFECTIVELY_CONSUMER_MAX_PAYLOAD_BYTES=4096") // the catalogue's too_large poison
	kafkatest.DeleteOnCleanup(t, r.topic+".dlq")
	now := time.Now()
	cfg := workload.Config{Accounts: 200, Events: 4000, Duplicates: 0.1, OutOfOrder: 0.1, Seed: 24,
		StartTime: now.Add(-48 * time.Hour), TimeSpan: 47 * time.Hour}
	exp := r.produce(t, cfg)

	// Poison, some from each day, keyed to accounts of the stream.
	var poison []*kgo.Record
	kinds := chaosPoison()
	i := 0
	for id := range exp.Accounts {
		if i == 2*len(kinds) {
			break
		}
		rec := kinds[i%len(kinds)].record(r.topic, id)
		rec.Value = []byte(strings.Replace(string(rec.Value), `"id":"x`, fmt.Sprintf(`"id":"p%d-x`, i), 1))
		rec.Timestamp = now.Add(-30 * time.Hour)
		if i%2 == 1 {
			rec.Timestamp = now.Add(-2 * time.Hour)
		}
		poison = append(poison, rec)
		i++
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, kafkatest.Producer(t).ProduceSync(ctx, poison...).FirstErr())
	records := exp.Records + len(poison)
	opened := openedAccounts(exp)

	process := func(what string) {
		t.Helper()
		w := r.startedWorker(t)
		r.waitApplied(t, records, 3*time.Minute)
		waitUntil(t, what+": the outbox settled", time.Minute, func(context.Context) bool {
			return r.db.Count(t, `SELECT count(*) FROM outbox WHERE state IN ('pending', 'sending')`) == 0
		})
		time.Sleep(time.Second) // a dispatcher round more
		w.signal(t, syscall.SIGTERM)
		require.Equal(t, 0, w.wait(t, time.Minute))
	}
	cleanAudit := func(what string) audit.Report {
		t.Helper()
		code, rep := r.runAudit(t)
		require.Equal(t, 0, code, "%s: audit exit code; unaccounted %v", what, rep.Unaccounted)
		require.True(t, rep.Clean(), what)
		require.Equal(t, int64(records), rep.Records, what)
		return rep
	}
	rewind24h := func(what string) replayPlan {
		t.Helper()
		code, stdout, stderr := r.replay(t, "--since", "24h", "--execute", "--json")
		require.Equal(t, 0, code, "%s: %s", what, stderr)
		var plan replayPlan
		require.NoError(t, json.Unmarshal([]byte(stdout), &plan), stdout)
		require.Greater(t, plan.Records, int64(records)/4, "%s: about the last day is reprocessed", what)
		require.Less(t, plan.Records, int64(records)*3/4, what)
		return plan
	}

	process("first pass")
	rep0, err := workload.Verify(context.Background(), r.db.Pool, exp, int64(len(poison)))
	require.NoError(t, err)
	keyedPoison := r.db.Count(t, `SELECT count(*) FROM effectively_claims WHERE disposition = 'dead_lettered'`)
	t.Logf("first pass: claims %v, dead letters %d, problems %q", rep0.Claims, rep0.DeadLetters, rep0.Problems)
	for _, p := range rep0.Problems {
		// Poison that had a key is claimed too (dead_lettered): the only
		// difference Verify may see is that claim count.
		require.Equal(t, fmt.Sprintf("claims: %d, want one per distinct event: %d", int64(exp.Distinct)+keyedPoison, exp.Distinct), p)
	}
	before := snapshotEffects(t, r)
	require.Equal(t, int64(2*len(opened)), before.Sent, "every opened account's CRM sync and welcome mail sent")
	crmBefore, mailBefore := crm.snapshot(), mail.snapshot()
	requireCRMOncePerAccount(t, crmBefore, opened)
	first := cleanAudit("first pass")
	require.Equal(t, int64(len(poison)), first.Counts[audit.DeadLettered])

	plan := rewind24h("rewind")
	process("reprocessing the last 24 h")
	require.Equal(t, before, snapshotEffects(t, r), "reprocessing the last 24 h changed an effect")
	require.Equal(t, crmBefore, crm.snapshot(), "reprocessing sent something to the CRM")
	require.Equal(t, mailBefore, mail.snapshot(), "reprocessing sent a mail")
	cleanAudit("after the rewind")
	t.Logf("rewound 24 h: %d of %d records reprocessed; snapshot unchanged, nothing sent", plan.Records, records)

	// Again with every claim pruned first: the effects alone keep it a
	// non-event.
	// The first pass closes the open claims generation (older than the
	// tiny generation interval, retention / 2); the second, once it has
	// been closed longer than the tiny retention, drops it.
	code, stdout, stderr := runCmd(t, append(append([]string{}, r.env...), tinyRetention...), "prune", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "effectively_claims: opened generation")
	time.Sleep(2100 * time.Millisecond)
	code, stdout, stderr = runCmd(t, append(append([]string{}, r.env...), tinyRetention...), "prune", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Zero(t, r.db.Count(t, `SELECT count(*) FROM effectively_claims`), "prune deleted every claim:\n%s", stdout)
	plan = rewind24h("rewind after pruning")
	process("reprocessing the last 24 h without claims")
	require.Positive(t, r.db.Count(t, `SELECT count(*) FROM effectively_claims`), "the last day was claimed anew: its handlers ran")
	require.Equal(t, before, snapshotEffects(t, r), "reprocessing without claims changed an effect")
	require.Equal(t, crmBefore, crm.snapshot(), "reprocessing without claims sent something to the CRM")
	require.Equal(t, mailBefore, mail.snapshot(), "reprocessing without claims sent a mail")
	rep := cleanAudit("after pruning and the rewind")
	require.Positive(t, rep.Counts[audit.Pruned], "the first day's records are accounted for as pruned")
	t.Logf("after pruning: %d records reprocessed; audit %v", plan.Records, rep.Counts)
}
