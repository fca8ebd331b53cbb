package test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/internal/kafkatest"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// replayPlan is the JSON a rewind prints.
type replayPlan struct {
	Group      string `json:"group"`
	Records    int64  `json:"records"`
	DryRun     bool   `json:"dry_run"`
	Partitions []struct {
		Partition     int32  `json:"partition"`
		StoredOffset  *int64 `json:"stored_offset"`
		KafkaOffset   *int64 `json:"kafka_offset"`
		CurrentOffset int64  `json:"current_offset"`
		TargetOffset  int64  `json:"target_offset"`
		Records       int64  `json:"records"`
		Action        string `json:"action"`
	} `json:"partitions"`
	ResetEpochs    map[string]int64 `json:"reset_epochs"`
	KafkaCommitted map[string]int64 `json:"kafka_committed"`
}

// replayReport is the JSON a bounded replay prints.
type replayReport struct {
	Group        string           `json:"group"`
	Records      int64            `json:"records"`
	Dispositions map[string]int64 `json:"dispositions"`
	Complete     bool             `json:"complete"`
	Rate         float64          `json:"records_per_second"`
}

// replay runs `effectively replay` with the rig's environment.
func (r *rig) replay(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCmd(t, r.env, append([]string{"replay", "--topic", r.topic}, args...)...)
}

// kafkaCommitted reads the group's committed Kafka offsets on the rig's topic.
func (r *rig) kafkaCommitted(t *testing.T, group string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kafkatest.Admin(t).FetchOffsets(ctx, group)
	require.NoError(t, err)
	out := map[int32]int64{}
	for p, o := range resp[r.topic] {
		require.NoError(t, o.Err)
		out[p] = o.At
	}
	return out
}

// resetEpochs reads the reset epoch of each stored position of group.
func (r *rig) resetEpochs(t *testing.T, group string) map[int32]int64 {
	t.Helper()
	return byPartition(t, r.db, `SELECT "partition", reset_epoch FROM consumer_offsets WHERE consumer_group = $1 AND topic = $2`, group, r.topic)
}

// byPartition runs a query of (partition, bigint) rows and returns them as
// a map.
func byPartition(t *testing.T, db pgtest.DB, query string, args ...any) map[int32]int64 {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), query, args...)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int32]int64{}
	for rows.Next() {
		var p int32
		var v int64
		require.NoError(t, rows.Scan(&p, &v))
		out[p] = v
	}
	require.NoError(t, rows.Err())
	return out
}

// fullPass runs a worker until the group has gone past every record, then
// stops it gracefully.
func (r *rig) fullPass(t *testing.T, records int, extra ...string) *proc {
	t.Helper()
	w := r.startedWorker(t, extra...)
	r.waitApplied(t, records, 3*time.Minute)
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute), "a SIGTERMed worker exits cleanly")
	return w
}

// dispositions reads effectively_events_total by disposition from a
// worker's /metrics.
func dispositions(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	return metricBy(t, addr, "effectively_events_total", "disposition")
}

// metricBy scrapes a worker's /metrics and sums the counter or gauge name by
// the value of label.
func metricBy(t *testing.T, addr, name, label string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range scrape(t, addr)[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out[l.GetValue()] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return out
}

func digest(t *testing.T, r *rig) workload.Digest {
	t.Helper()
	d, err := workload.StateDigest(context.Background(), r.db.Pool)
	require.NoError(t, err)
	return d
}

// While a worker is a member of the group, replay refuses both to rewind it
// and to replay under it, names the member, and changes nothing.
func TestReplayRefusedWhileWorkerIsMember(t *testing.T) {
	t.Parallel()
	r := newRig(t, 3)
	exp := r.produce(t, testWorkload(600, 60, 31))
	w := r.startedWorker(t)
	r.waitApplied(t, exp.Records, 2*time.Minute)
	posBefore, err := r.positions(context.Background())
	require.NoError(t, err)
	kafkaBefore := r.kafkaCommitted(t, r.group)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	described, err := kafkatest.Admin(t).DescribeGroups(ctx, r.group)
	require.NoError(t, err)
	members := described[r.group].Members
	require.Len(t, members, 1, "the worker is the group's one member")

	for _, args := range [][]string{
		{"--from-start", "--execute"},
		{"--since", "1h"},
		{"--replay-group", r.group, "--from-start"},
	} {
		code, stdout, stderr := r.replay(t, args...)
		require.Equal(t, 1, code, "replay %v must refuse: %s", args, stderr)
		require.Contains(t, stderr, "1 active member(s)")
		require.Contains(t, stderr, members[0].MemberID, "the message names the member")
		require.Contains(t, stderr, "client effectively")
		require.Contains(t, stderr, "stop the workers")
		require.Empty(t, stdout, "a refused replay prints no plan")
	}

	posAfter, err := r.positions(context.Background())
	require.NoError(t, err)
	require.Equal(t, posBefore, posAfter)
	require.Equal(t, kafkaBefore, r.kafkaCommitted(t, r.group))
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
}

// A dry run — the default — prints the plan and changes neither the stored
// positions nor Kafka's committed offsets.
func TestReplayDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, 3)
	exp := r.produce(t, testWorkload(900, 90, 32))
	r.fullPass(t, exp.Records)
	posBefore, err := r.positions(context.Background())
	require.NoError(t, err)
	kafkaBefore := r.kafkaCommitted(t, r.group)
	require.Len(t, posBefore, 3)
	require.Equal(t, posBefore, kafkaBefore, "after a clean stop Kafka's commits equal the stored positions")

	code, stdout, stderr := r.replay(t, "--from-start", "--json")
	require.Equal(t, 0, code, stderr)
	var plan replayPlan
	require.NoError(t, json.Unmarshal([]byte(stdout), &plan), stdout)
	require.True(t, plan.DryRun)
	require.Equal(t, int64(exp.Records), plan.Records, "from the start, every record is reprocessed")
	require.Len(t, plan.Partitions, 3)
	for _, pp := range plan.Partitions {
		require.Equal(t, "rewind", pp.Action)
		require.Equal(t, int64(0), pp.TargetOffset)
		require.Equal(t, posBefore[pp.Partition], pp.CurrentOffset)
		require.Equal(t, posBefore[pp.Partition], *pp.StoredOffset)
		require.Equal(t, kafkaBefore[pp.Partition], *pp.KafkaOffset)
	}

	code, stdout, stderr = r.replay(t, "--to-offsets", "0:0,1:1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "PARTITION")
	require.Contains(t, stdout, "dry run: nothing was changed")

	posAfter, err := r.positions(context.Background())
	require.NoError(t, err)
	require.Equal(t, posBefore, posAfter, "a dry run leaves the stored positions alone")
	require.Equal(t, kafkaBefore, r.kafkaCommitted(t, r.group), "a dry run leaves Kafka's offsets alone")
	for p, e := range r.resetEpochs(t, r.group) {
		require.Zero(t, e, "partition %d's reset epoch", p)
	}

	// A partial rewind moves only the partition named; a target ahead of
	// the position is then refused: replay only rewinds.
	code, _, stderr = r.replay(t, "--to-offsets", "0:5", "--execute")
	require.Equal(t, 0, code, stderr)
	posAfter, err = r.positions(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(5), posAfter[0])
	require.Equal(t, posBefore[1], posAfter[1])
	require.Equal(t, posBefore[2], posAfter[2])
	require.Equal(t, map[int32]int64{0: 1, 1: 0, 2: 0}, r.resetEpochs(t, r.group))
	require.Equal(t, int64(5), r.kafkaCommitted(t, r.group)[0])

	code, _, stderr = r.replay(t, "--to-offsets", "0:6", "--execute")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "replay only rewinds")
	posAfter, err = r.positions(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(5), posAfter[0], "a forward move is refused")
}

// After a full pass, rewinding to the start and running the worker again
// re-reads everything and changes nothing: every re-read record is a
// duplicate, the claims and the effects are the same.
func TestReplayFromStartAfterFullPassChangesNoEffect(t *testing.T) {
	t.Parallel()
	r := newRig(t, 4)
	exp := r.produce(t, testWorkload(3000, 200, 33))
	r.fullPass(t, exp.Records)
	r.verify(t, exp)
	before := digest(t, r)
	deadBefore := r.db.Count(t, `SELECT count(*) FROM dead_letters`)
	pos, err := r.positions(context.Background())
	require.NoError(t, err)

	code, stdout, stderr := r.replay(t, "--from-start", "--execute", "--json")
	require.Equal(t, 0, code, stderr)
	var plan replayPlan
	require.NoError(t, json.Unmarshal([]byte(stdout), &plan), stdout)
	require.Equal(t, int64(exp.Records), plan.Records)
	require.Len(t, plan.ResetEpochs, 4)
	require.Len(t, plan.KafkaCommitted, 4)

	after, err := r.positions(context.Background())
	require.NoError(t, err)
	for p := range pos {
		require.Equal(t, int64(0), after[p], "partition %d rewound to its start", p)
	}
	for p, e := range r.resetEpochs(t, r.group) {
		require.Equal(t, int64(1), e, "partition %d's reset epoch is bumped", p)
	}
	for p, o := range r.kafkaCommitted(t, r.group) {
		require.Equal(t, int64(0), o, "partition %d's Kafka offset rewound too", p)
	}

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	w := r.startedWorker(t, "EFFECTIVELY_HTTP_ADDR="+addr)
	r.waitApplied(t, exp.Records, 3*time.Minute)
	var ds map[string]float64
	waitUntil(t, "every re-read record counted", time.Minute, func(context.Context) bool {
		ds = dispositions(t, addr)
		return ds["duplicate"] >= float64(exp.Records)
	})
	require.Equal(t, float64(exp.Records), ds["duplicate"], "every re-read record is a duplicate")
	for _, d := range []string{"applied", "stale", "parked", "dead_lettered"} {
		require.Zero(t, ds[d], "no re-read record is %s", d)
	}
	require.Contains(t, w.stderr.String(), `"reset_epoch":1`, "the worker logs the reset epoch it starts from")
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))

	require.Equal(t, before, digest(t, r), "the effects are unchanged")
	require.Equal(t, deadBefore, r.db.Count(t, `SELECT count(*) FROM dead_letters`))
	r.verify(t, exp)
}

// Records whose timestamps span 48 hours: --since 24h rewinds each partition
// to its first record of the last 24 hours, and only those are reprocessed.
func TestReplaySinceRewindsOnlyTheLaterPart(t *testing.T) {
	t.Parallel()
	r := newRig(t, 3)
	cfg := testWorkload(2400, 200, 34)
	cfg.StartTime, cfg.TimeSpan = time.Now().Add(-48*time.Hour), 48*time.Hour
	exp := r.produce(t, cfg)
	r.fullPass(t, exp.Records)
	before := digest(t, r)

	cutLo := time.Now().Add(-24 * time.Hour)
	code, stdout, stderr := r.replay(t, "--since", "24h", "--execute", "--json")
	cutHi := time.Now().Add(-24 * time.Hour)
	require.Equal(t, 0, code, stderr)
	var plan replayPlan
	require.NoError(t, json.Unmarshal([]byte(stdout), &plan), stdout)

	// Check every target against the record timestamps themselves.
	recs := kafkatest.ReadCommitted(t, r.topic, exp.Records, time.Minute)
	ts := map[int32]map[int64]time.Time{}
	ends := map[int32]int64{}
	for _, rec := range recs {
		if ts[rec.Partition] == nil {
			ts[rec.Partition] = map[int64]time.Time{}
		}
		ts[rec.Partition][rec.Offset] = rec.Timestamp
		ends[rec.Partition] = max(ends[rec.Partition], rec.Offset+1)
	}
	require.Len(t, plan.Partitions, 3)
	var total int64
	for _, pp := range plan.Partitions {
		p, target := pp.Partition, pp.TargetOffset
		require.Equal(t, "rewind", pp.Action)
		require.Greater(t, target, int64(0), "partition %d: the first day is not reprocessed", p)
		require.Less(t, target, ends[p], "partition %d: the last day is", p)
		require.Equal(t, ends[p]-target, pp.Records)
		require.False(t, ts[p][target].Before(cutLo.Add(-time.Second)), "partition %d: record %d (%s) is within the last 24 h", p, target, ts[p][target])
		require.True(t, ts[p][target-1].Before(cutHi), "partition %d: record %d (%s) is older than 24 h", p, target-1, ts[p][target-1])
		total += pp.Records
	}
	require.Equal(t, total, plan.Records)
	require.Greater(t, plan.Records, int64(exp.Records)/3, "about half the records are in the last 24 h")
	require.Less(t, plan.Records, int64(exp.Records)*2/3)

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	w := r.startedWorker(t, "EFFECTIVELY_HTTP_ADDR="+addr)
	r.waitApplied(t, exp.Records, 3*time.Minute)
	waitUntil(t, "the re-read records counted", time.Minute, func(context.Context) bool {
		return dispositions(t, addr)["duplicate"] >= float64(plan.Records)
	})
	ds := dispositions(t, addr)
	require.Equal(t, float64(plan.Records), ds["duplicate"], "exactly the last day is re-read, all duplicates")
	require.Zero(t, ds["applied"])
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	require.Equal(t, before, digest(t, r))
	r.verify(t, exp)
}

// A bounded replay of an already-applied topic, under a group of its own,
// applies nothing new, leaves the workers' group alone and exits 0.
func TestReplayBoundedOverAppliedTopic(t *testing.T) {
	t.Parallel()
	r := newRig(t, 3)
	exp := r.produce(t, testWorkload(2000, 150, 35))
	r.fullPass(t, exp.Records)
	before := digest(t, r)
	posBefore, err := r.positions(context.Background())
	require.NoError(t, err)
	kafkaBefore := r.kafkaCommitted(t, r.group)
	name := kafkatest.NewGroup(t)

	code, stdout, stderr := r.replay(t, "--replay-group", name, "--from-start", "--json")
	require.Equal(t, 0, code, stderr)
	var rep replayReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	require.True(t, rep.Complete)
	require.Equal(t, name, rep.Group)
	require.Equal(t, int64(exp.Records), rep.Records)
	require.Zero(t, rep.Dispositions["applied"], "0 new applied")
	require.Equal(t, int64(exp.Records), rep.Dispositions["duplicate"])
	require.Greater(t, rep.Rate, 0.0)

	// Its own positions, at the end of each partition; the group's untouched.
	var replayed int64
	require.NoError(t, r.db.Pool.QueryRow(context.Background(),
		`SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets WHERE consumer_group = $1 AND topic = $2`, name, r.topic).Scan(&replayed))
	require.Equal(t, int64(exp.Records), replayed)
	posAfter, err := r.positions(context.Background())
	require.NoError(t, err)
	require.Equal(t, posBefore, posAfter)
	require.Equal(t, kafkaBefore, r.kafkaCommitted(t, r.group))
	require.Equal(t, before, digest(t, r))

	// Again, plain output, under the same name: it starts over from the start.
	code, stdout, stderr = r.replay(t, "--replay-group", name, "--from-start", "--progress-interval", "100ms")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^applied\s+0$`, stdout)
	require.Regexp(t, fmt.Sprintf(`(?m)^duplicate\s+%d$`, exp.Records), stdout)
	require.Equal(t, before, digest(t, r))
}

// Offsets reset with Kafka's own tools (here kadm, as kafka-consumer-groups
// would) do not move the worker: it explains in its log that PostgreSQL's
// position wins and that `effectively replay` is the way to rewind.
func TestKafkaToolsResetIsExplainedAndIgnored(t *testing.T) {
	t.Parallel()
	// Batches of 100: Kafka's commit behind by more than one batch is not
	// a commit lost in a crash.
	r := newRig(t, 2, "EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS=100")
	exp := r.produce(t, testWorkload(1500, 100, 36))
	r.fullPass(t, exp.Records)
	pos, err := r.positions(context.Background())
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs := kadm.Offsets{}
	for p := range pos {
		offs.Add(kadm.Offset{Topic: r.topic, Partition: p, At: 0, LeaderEpoch: -1})
	}
	require.NoError(t, kafkatest.Admin(t).CommitAllOffsets(ctx, r.group, offs))

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	w := r.startedWorker(t, "EFFECTIVELY_HTTP_ADDR="+addr)
	waitUntil(t, "the worker explains the reset", time.Minute, func(context.Context) bool {
		return strings.Count(w.stderr.String(), "rewound with Kafka's own tools") >= len(pos)
	})
	require.Contains(t, w.stderr.String(), "PostgreSQL is authoritative and wins")
	require.Contains(t, w.stderr.String(), "effectively replay")
	// Nothing is re-read: the positions stay where they were.
	time.Sleep(2 * time.Second)
	require.Zero(t, dispositions(t, addr)["duplicate"])
	after, err := r.positions(context.Background())
	require.NoError(t, err)
	require.Equal(t, pos, after)
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
}
