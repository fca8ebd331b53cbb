package test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/examples/accounts/workload"
)

// tinyRetention makes claims expire after 2 s and lets that pass
// validation (2 × 500 ms horizon + 0 window ≤ 2 s); the pruner runs every
// second.
var tinyRetention = []string{
	"EFFECTIVELY_DEDUPE_RETENTION=2s",
	"EFFECTIVELY_UPSTREAM_MAX_RETRY_HORIZON=500ms",
	"EFFECTIVELY_DEDUPE_RECONCILIATION_WINDOW=0s",
	"EFFECTIVELY_DEDUPE_PRUNE_INTERVAL=1s",
}

// Effects stay exactly-once after their claims expire. A workload (with
// duplicates and disorder, side effects on) is processed; the background
// pruner of a worker with a tiny retention deletes every claim; then the
// whole workload is produced again. Without claims, every record of the
// second copy is claimed and applied again — and the version gates, the
// ledger's event-keyed rows and the outbox's (event key, operation)
// constraint leave the state digest unchanged and send nothing more.
func TestRetentionEffectsStayIdempotentAfterClaimsExpire(t *testing.T) {
	t.Parallel()
	var crmMu sync.Mutex
	crmCalls := 0
	crm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		crmMu.Lock()
		crmCalls++
		crmMu.Unlock()
	}))
	t.Cleanup(crm.Close)
	calls := func() int { crmMu.Lock(); defer crmMu.Unlock(); return crmCalls }

	r := newRig(t, 3, "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=100", "EFFECTIVELY_EFFECTS_CRM_URL="+crm.URL)
	cfg := workload.Config{Accounts: 150, Events: 3000, Duplicates: 0.1, OutOfOrder: 0.1, Seed: 61}
	exp := r.produce(t, cfg)
	opened := exp.ByType[workload.TypeAccountOpened]

	w := r.worker(t)
	r.waitApplied(t, exp.Records, 2*time.Minute)
	waitUntil(t, "the CRM intents sent", time.Minute, func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM outbox WHERE state = 'sent'`) == int64(opened)
	})
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	r.verify(t, exp)
	ctx := context.Background()
	before, err := workload.StateDigest(ctx, r.db.Pool)
	require.NoError(t, err)
	require.Equal(t, int64(exp.Distinct), before.Claims)
	require.Equal(t, opened, calls())

	// A worker with a tiny retention: its background pruner closes the
	// open claims generation (older than the generation interval,
	// retention / 2) and drops it 2 s later, and counts its claims.
	addr := retentionHTTPAddr(t)
	w = r.worker(t, append(tinyRetention, "EFFECTIVELY_HTTP_ADDR="+addr)...)
	waitUntil(t, "every claim pruned", time.Minute, func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM effectively_claims`) == 0
	})
	// Claims are dropped a generation at a time and counted by
	// PostgreSQL's estimate of the generation's rows.
	waitUntil(t, "the pruned-rows metric", 30*time.Second, func(context.Context) bool {
		return prunedMetric(t, addr, "effectively_claims") >= int64(float64(exp.Distinct)*0.95)
	})
	// The pass that dropped them completed: the stalled-pruner alert reads
	// when.
	last := scrape(t, addr)["effectively_pruner_last_pass_timestamp_seconds"].GetMetric()
	require.Len(t, last, 1)
	require.InDelta(t, float64(time.Now().Unix()), last[0].GetGauge().GetValue(), 60, "the pruner's last completed pass is recent")
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	require.Contains(t, w.stderr.String(), `"msg":"pruned"`)
	require.InEpsilon(t, exp.Distinct, r.db.Count(t, `SELECT rows_pruned FROM prune_watermarks WHERE table_name = 'effectively_claims'`), 0.05)
	require.Equal(t, int64(opened), r.db.Count(t, `SELECT count(*) FROM outbox`), "outbox.retention (default 14 days) keeps the sent intents")

	// Every event again. No claim catches them: each is claimed anew and
	// its handler runs — and changes nothing.
	r.produce(t, cfg)
	w = r.worker(t)
	r.waitApplied(t, 2*exp.Records, 2*time.Minute)
	time.Sleep(2 * time.Second) // a dispatcher round or more
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))

	after, err := workload.StateDigest(ctx, r.db.Pool)
	require.NoError(t, err)
	require.Equal(t, before, after, "the effects are unchanged after re-applying every event without claims")
	// Proof the second copy really ran the handlers: every claim now has
	// its origin in the second copy (offsets from each partition's first
	// copy length up).
	firstCopy := map[int32]int64{}
	pos, err := r.positions(ctx)
	require.NoError(t, err)
	for p, n := range pos {
		firstCopy[p] = n / 2
	}
	var inSecond int64
	for p, n := range firstCopy {
		inSecond += r.db.Count(t, `SELECT count(*) FROM effectively_claims WHERE "partition" = $1 AND "offset" >= $2`, p, n)
	}
	require.Equal(t, int64(exp.Distinct), inSecond, "every claim was made by the second copy: the first copy's claims were gone")
	require.Positive(t, r.db.Count(t, `SELECT count(*) FROM effectively_claims WHERE disposition = 'stale'`),
		"account events re-applied without claims are dropped by the version gate")
	require.Equal(t, int64(opened), r.db.Count(t, `SELECT count(*) FROM outbox`), "no second intent per (event key, operation)")
	require.Equal(t, opened, calls(), "no second CRM call")

	// The effects are those the produced events call for; only the claims'
	// dispositions differ from a first pass: every account event, re-applied
	// at a version already stored, is stale, and every ledger event finds
	// its entry (applied, nothing written).
	rep, err := workload.Verify(ctx, r.db.Pool, exp, 0)
	require.NoError(t, err)
	accountEvents := exp.ByType[workload.TypeAccountOpened] + exp.ByType[workload.TypeAccountUpdated] + exp.ByType[workload.TypeAccountClosed]
	require.Equal(t, []string{fmt.Sprintf("stale claims: %d, want %d", accountEvents, exp.StaleExpected)}, rep.Problems)
	require.Equal(t, map[string]int64{"stale": int64(accountEvents), "applied": int64(exp.Distinct - accountEvents)}, rep.Claims)
}

// retentionHTTPAddr returns a localhost address with a port free right now.
func retentionHTTPAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// prunedMetric reads effectively_pruned_rows_total{table} from a worker's
// /metrics (-1 when it does not answer yet).
func prunedMetric(t *testing.T, addr, table string) int64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	m := regexp.MustCompile(fmt.Sprintf(`(?m)^effectively_pruned_rows_total\{table="%s"\} (\S+)$`, regexp.QuoteMeta(table))).FindSubmatch(body)
	if m == nil {
		return -1
	}
	f, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return int64(f)
}
