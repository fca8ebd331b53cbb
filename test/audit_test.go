package test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/audit"
	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// runAudit runs `effectively audit --json` on the rig's topic and returns
// the exit code and the report.
func (r *rig) runAudit(t *testing.T, extra ...string) (int, audit.Report) {
	t.Helper()
	code, stdout, stderr := runCmd(t, r.env, append([]string{"audit", "--topic", r.topic, "--json"}, extra...)...)
	var rep audit.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), "exit %d; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	return code, rep
}

// The audit accounts for every record of a processed topic — applied,
// stale, duplicate, dead-lettered by reason — and its counts match what was
// produced. A claim or dead letter deleted behind the worker's back makes
// the records it accounted for unaccounted (listed, exit 1). After a prune,
// the records whose claims and dead letters retention removed are pruned,
// not unaccounted.
func TestAuditAccountsForEveryRecordAndFindsWhatIsMissing(t *testing.T) {
	t.Parallel()
	r := newRig(t, 3, "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=100")
	kafkatest.DeleteOnCleanup(t, r.topic+".dlq")

	// Poison first (so it sits at low offsets), then the workload.
	poison := []*kgo.Record{
		{Topic: r.topic, Key: []byte("poison-1"), Value: []byte(`{"specversion":"1.0",`)},
		{Topic: r.topic, Key: []byte("poison-2"), Value: []byte(`{"hello":"world"}`)},
		{Topic: r.topic, Key: []byte("poison-3")},
		cetest.Account(r.topic, "conflicted", "account.opened", "poison-4", 1, "first"),
		cetest.Account(r.topic, "conflicted", "account.opened", "poison-4", 1, "second"),
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, kafkatest.Producer(t).ProduceSync(ctx, poison...).FirstErr())
	exp := r.produce(t, testWorkload(6000, 300, 71))
	records := exp.Records + len(poison)

	w := r.worker(t)
	r.waitApplied(t, records, 2*time.Minute)
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))

	code, rep := r.runAudit(t)
	require.Equal(t, 0, code)
	require.Equal(t, int64(records), rep.Records)
	require.Equal(t, int64(exp.Distinct+1), rep.Counts[audit.Applied]+rep.Counts[audit.Stale], "every distinct event (and the conflict's first copy) applied or stale")
	require.Equal(t, int64(exp.StaleExpected), rep.Counts[audit.Stale])
	require.Equal(t, int64(exp.Duplicates), rep.Counts[audit.Duplicate])
	require.Equal(t, int64(4), rep.Counts[audit.DeadLettered])
	require.Equal(t, map[string]int64{"not_json": 1, "not_cloudevents": 1, "empty_value": 1, "conflict": 1}, rep.DeadLetterReasons)
	for _, o := range []string{audit.Parked, audit.Pruned, audit.NotProcessed, audit.Unaccounted} {
		require.Zero(t, rep.Counts[o], o)
	}
	require.Empty(t, rep.Unaccounted)
	require.Len(t, rep.Partitions, 3)

	// The text report, as an operator sees it.
	code, stdout, _ := runCmd(t, r.env, "audit", "--topic", r.topic)
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^duplicate\s+`+strconv.Itoa(exp.Duplicates)+`\s*$`, stdout)
	require.Contains(t, stdout, "every record is accounted for")
	t.Logf("audit output:\n%s", stdout)

	// A time range: records timestamped before the first is nothing.
	code, rep = r.runAudit(t, "--to-time", "2000-01-01T00:00:00Z")
	require.Equal(t, 0, code)
	require.Zero(t, rep.Records)

	// Sabotage: one claim (of an applied event early on partition 1, so later claims lie above it) and the
	// not_json dead letter disappear.
	var lostKey string
	var lostClaim struct {
		p int32
		o int64
	}
	require.NoError(t, r.db.Pool.QueryRow(ctx, `DELETE FROM effectively_claims WHERE event_key = (
		SELECT event_key FROM effectively_claims WHERE "partition" = 1 AND disposition = 'applied' ORDER BY "offset" LIMIT 1 OFFSET 5)
		RETURNING event_key, "partition", "offset"`).Scan(&lostKey, &lostClaim.p, &lostClaim.o))
	var lostDL struct {
		p int32
		o int64
	}
	require.NoError(t, r.db.Pool.QueryRow(ctx, `DELETE FROM dead_letters WHERE reason = 'not_json' RETURNING "partition", "offset"`).Scan(&lostDL.p, &lostDL.o))

	code, rep = r.runAudit(t)
	require.Equal(t, 3, code, "unaccounted records fail the audit: exit 3, a finding")
	require.GreaterOrEqual(t, rep.Counts[audit.Unaccounted], int64(2))
	require.Equal(t, int64(records), rep.Counts[audit.Applied]+rep.Counts[audit.Stale]+rep.Counts[audit.Duplicate]+rep.Counts[audit.DeadLettered]+rep.Counts[audit.Unaccounted])
	require.Len(t, rep.Unaccounted, int(rep.Counts[audit.Unaccounted]))
	foundClaim, foundDL := false, false
	for _, u := range rep.Unaccounted {
		switch {
		case u.Partition == lostDL.p && u.Offset == lostDL.o:
			foundDL = true
			require.Contains(t, u.Problem, "does not decode (not_json) and has no dead letter")
		case u.EventKey == lostKey:
			// The lost claim's record, and any duplicate of it.
			foundClaim = foundClaim || (u.Partition == lostClaim.p && u.Offset == lostClaim.o)
			require.Equal(t, "no claim of its event key and no dead letter", u.Problem)
		default:
			t.Fatalf("unexpected unaccounted record %+v", u)
		}
	}
	require.True(t, foundClaim && foundDL, "both sabotaged records are listed: %+v", rep.Unaccounted)
	code, stdout, stderr := runCmd(t, r.env, "audit", "--topic", r.topic)
	require.Equal(t, 3, code)
	require.Contains(t, stdout, fmt.Sprintf("%s/%d@%d key=poison-1: does not decode (not_json) and has no dead letter", r.topic, lostDL.p, lostDL.o))
	require.Contains(t, stderr, "are unaccounted for")

	// Retention: partition 1's claims are in a claims generation of their
	// own, closed a month ago (every other claim moves on to the open one),
	// and its dead letters are a month old and published; `effectively
	// prune` drops that generation and deletes the dead letters. Its
	// records are pruned now — the sabotaged claim's included, since it
	// lies below the watermark — and the other partitions are audited as
	// before.
	closed := r.db.RotateClaims(t)
	_, err := r.db.Pool.Exec(ctx, `UPDATE effectively_claims SET generation = `+pgtest.OpenGeneration+` WHERE generation <= $1 AND "partition" <> 1`, closed)
	require.NoError(t, err)
	// The close recorded every partition's position; as if the other
	// partitions' records had been settled after it, only partition 1's
	// stays.
	_, err = r.db.Pool.Exec(ctx, `DELETE FROM claim_generation_offsets WHERE generation <= $1 AND "partition" <> 1`, closed)
	require.NoError(t, err)
	r.db.AgeClosedClaims(t, 30*24*time.Hour)
	claims, p1Claims := r.db.Count(t, `SELECT count(*) FROM effectively_claims`), r.db.Count(t, `SELECT count(*) FROM effectively_claims WHERE "partition" = 1`)
	require.Positive(t, p1Claims)
	n := r.db.Count(t, `WITH d AS (UPDATE dead_letters SET last_seen_at = now() - interval '30 days', published_at = coalesce(published_at, now()) WHERE "partition" = 1 RETURNING 1)
		SELECT count(*) FROM d`)
	code, stdout, _ = runCmd(t, r.env, "prune", "--dry-run")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, fmt.Sprintf("dry run: %d rows would be deleted and 1 claims generation dropped", n))
	// prune deletes: without a terminal it refuses without --yes, with what
	// it would delete, and deletes nothing.
	code, _, stderr = runCmd(t, r.env, "prune")
	require.Equal(t, 2, code, stderr)
	require.Regexp(t, `this would delete about \d+ rows \(claims by PostgreSQL's estimate\) and drop 1 claims generations that have outlived dedupe.retention`, stderr)
	require.Contains(t, stderr, "confirm with --yes")
	require.Equal(t, claims, r.db.Count(t, `SELECT count(*) FROM effectively_claims`), "nothing pruned")
	code, stdout, _ = runCmd(t, r.env, "prune", "--yes")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, fmt.Sprintf("pruned %d rows and 1 claims generation in ", n))
	require.Equal(t, claims-p1Claims, r.db.Count(t, `SELECT count(*) FROM effectively_claims`), "partition 1's claims, and only they, are gone")
	require.Regexp(t, regexp.MustCompile(`(?m)^effectively_claims\s`), stdout)
	t.Logf("prune output:\n%s", stdout)

	code, rep = r.runAudit(t)
	var p1 int64
	for _, p := range rep.Partitions {
		if p.Partition == 1 {
			p1 = p.Records
			require.Positive(t, p.PrunedThrough)
		}
	}
	require.Equal(t, p1, rep.Counts[audit.Pruned], "every record of partition 1 is pruned")
	wantUnaccounted := int64(1) // the not_json record's dead letter, unless it was on partition 1
	if lostDL.p == 1 {
		wantUnaccounted = 0
	}
	require.Equal(t, wantUnaccounted, rep.Counts[audit.Unaccounted], "%+v", rep.Unaccounted)
	require.Equal(t, int(wantUnaccounted)*3, code, "exit 3: the audit found unaccounted records")
	require.Equal(t, int64(records), rep.Counts[audit.Applied]+rep.Counts[audit.Stale]+rep.Counts[audit.Duplicate]+rep.Counts[audit.DeadLettered]+rep.Counts[audit.Pruned]+rep.Counts[audit.Unaccounted])

	// Records the group has not reached yet are reported apart, and are
	// not a failure.
	late := []*kgo.Record{
		cetest.Account(r.topic, "late-1", "account.opened", "late-a", 1, "late"),
		cetest.Account(r.topic, "late-2", "account.opened", "late-b", 1, "late"),
		cetest.Account(r.topic, "late-3", "account.opened", "late-c", 1, "late"),
	}
	require.NoError(t, kafkatest.Producer(t).ProduceSync(ctx, late...).FirstErr())
	code, rep = r.runAudit(t)
	require.Equal(t, int64(records+len(late)), rep.Records)
	require.Equal(t, int64(len(late)), rep.Counts[audit.NotProcessed])
	require.Equal(t, wantUnaccounted, rep.Counts[audit.Unaccounted])
	require.Equal(t, int(wantUnaccounted)*3, code, "exit 3: the audit found unaccounted records")
}
