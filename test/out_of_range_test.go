package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

// produceAccounts sends one account.opened per id to the rig's topic.
func (r *rig) produceAccounts(t *testing.T, ids ...string) {
	t.Helper()
	recs := make([]*kgo.Record, 0, len(ids))
	for _, id := range ids {
		recs = append(recs, cetest.Account(r.topic, "open-"+id, "account.opened", id, 1, "n-"+id))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, kafkatest.Producer(t).ProduceSync(ctx, recs...).FirstErr())
}

func accountIDs(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s-%02d", prefix, i))
	}
	return out
}

// readyz returns a worker's /readyz status code and body.
func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// Records deleted before the group processed them (retention, DeleteRecords)
// leave the stored position below the log start. The partition stops with
// an alert and applies nothing — not even the records still there — until
// the operator decides; kafka.offset_out_of_range: log-start then skips
// exactly the deleted offsets and applies the rest.
func TestPositionBelowTheLogStartStopsThePartition(t *testing.T) {
	t.Parallel()
	r := newRig(t, 1)
	r.produceAccounts(t, accountIDs("a", 0, 10)...)
	r.fullPass(t, 10)

	// Ten more, of which the first five are deleted unprocessed.
	r.produceAccounts(t, accountIDs("a", 10, 20)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: r.topic, Partition: 0, At: 15})
	resp, err := kafkatest.Admin(t).DeleteRecords(ctx, del)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	w := r.startedWorker(t, "EFFECTIVELY_HTTP_ADDR="+addr)
	waitUntil(t, "the worker stops the partition", time.Minute, func(context.Context) bool {
		return strings.Contains(w.stderr.String(), "records were deleted before this group processed them")
	})
	log := w.stderr.String()
	require.Contains(t, log, `"offsets_deleted":5`)
	require.Contains(t, log, "kafka.offset_out_of_range: log-start")
	require.Equal(t, float64(1), stateGauges(t, addr, "stopped"))
	code, body := readyz(t, addr)
	require.Equal(t, http.StatusOK, code, "a stopped partition is reported, not a reason to take the pod out")
	require.Contains(t, body, "stopped")
	st := r.status(t, "--worker", "http://"+addr)
	require.Equal(t, "stopped", st.Partitions[0].State)
	require.Contains(t, st.Partitions[0].Error, "records deleted unprocessed")
	// Stopped means stopped: the five records still in the log wait too.
	time.Sleep(2 * time.Second)
	require.Equal(t, int64(10), r.db.Count(t, `SELECT count(*) FROM accounts`))
	require.Equal(t, int64(10), r.applied(t))
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	require.Equal(t, int64(10), r.applied(t), "a stopped partition's position does not move")

	// The operator accepts the loss.
	w = r.startedWorker(t, "EFFECTIVELY_HTTP_ADDR="+addr, "EFFECTIVELY_KAFKA_OFFSET_OUT_OF_RANGE=log-start")
	r.waitApplied(t, 20, time.Minute)
	require.Equal(t, map[string]float64{"0": 5}, metricBy(t, addr, "effectively_offsets_skipped_total", "partition"))
	require.Contains(t, w.stderr.String(), `"offsets_skipped":5`)
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	require.Equal(t, int64(15), r.db.Count(t, `SELECT count(*) FROM accounts`))
	require.Equal(t, int64(0), r.db.Count(t, `SELECT count(*) FROM accounts WHERE id BETWEEN 'a-10' AND 'a-14'`), "the deleted records were never seen")
	require.Equal(t, int64(0), r.db.Count(t, `SELECT count(*) FROM dead_letters`))
}

// A topic deleted and recreated under the same name starts again at offset
// 0, far below the group's stored position. Without care the new records
// would look like a zombie's batch and be skipped. The partition stops (under
// either policy) until a replay moves the position to the new log's start;
// then the new records apply and the old ones stay applied once.
func TestRecreatedTopicStopsUntilReplayed(t *testing.T) {
	t.Parallel()
	r := newRig(t, 1, "EFFECTIVELY_KAFKA_OFFSET_OUT_OF_RANGE=log-start")
	r.produceAccounts(t, accountIDs("a", 0, 10)...)
	r.fullPass(t, 10)

	adm := kafkatest.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := adm.DeleteTopics(ctx, r.topic)
	require.NoError(t, err)
	var created kadm.CreateTopicResponse
	waitUntil(t, "the topic is recreated", time.Minute, func(ctx context.Context) bool {
		created, err = adm.CreateTopic(ctx, 1, 1, nil, r.topic)
		if err == nil {
			err = created.Err
		}
		return err == nil
	})
	// The broker applies the controller's metadata on its own time: until
	// it serves the new topic's ID with a leader, a produce can still land
	// in the old, deleted log (and is gone with it).
	waitUntil(t, "the broker serves the new topic", time.Minute, func(ctx context.Context) bool {
		md, err := adm.Metadata(ctx, r.topic)
		if err != nil {
			return false
		}
		d, ok := md.Topics[r.topic]
		return ok && d.Err == nil && d.ID == created.ID && len(d.Partitions) == 1 &&
			d.Partitions[0].Err == nil && d.Partitions[0].Leader >= 0
	})
	r.produceAccounts(t, accountIDs("b", 0, 3)...)
	ends, err := adm.ListEndOffsets(ctx, r.topic)
	require.NoError(t, err)
	end, _ := ends.Lookup(r.topic, 0)
	require.NoError(t, end.Err)
	require.Equal(t, int64(3), end.Offset, "the new log holds the three records")

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	w := r.startedWorker(t, "EFFECTIVELY_HTTP_ADDR="+addr)
	waitUntil(t, "the worker stops the partition", time.Minute, func(context.Context) bool {
		return strings.Contains(w.stderr.String(), "past the end of its log")
	})
	require.Contains(t, w.stderr.String(), "--from-start")
	require.Equal(t, float64(1), stateGauges(t, addr, "stopped"))
	time.Sleep(2 * time.Second)
	require.Equal(t, int64(10), r.db.Count(t, `SELECT count(*) FROM accounts`), "the new records were not skipped as below the position, nor applied")
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	require.Equal(t, int64(10), r.applied(t))

	code, out, stderr := r.replay(t, "--from-start", "--execute", "--json")
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", out, stderr)
	var plan replayPlan
	require.NoError(t, json.Unmarshal([]byte(out), &plan), out)
	require.Equal(t, int64(3), plan.Records, "the plan counts what the new log has, not the old position")
	pos, err := r.positions(context.Background())
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 0}, pos)
	require.Equal(t, map[int32]int64{0: 1}, r.resetEpochs(t, r.group))

	r.fullPass(t, 3)
	require.Equal(t, int64(13), r.db.Count(t, `SELECT count(*) FROM accounts`))
	require.Equal(t, int64(13), r.db.Count(t, `SELECT count(*) FROM effectively_claims WHERE disposition = 'applied'`))
}

// Keys hash over the partition count, so a topic that gains partitions
// splits resources across two partitions. The worker notices, both while it
// runs (the group is assigned the new partitions) and at start-up (the count
// differs from the one recorded), and warns; records in the new partitions
// are not mistaken for a producer with another partitioner.
func TestPartitionCountChangeIsWarnedAbout(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2, "EFFECTIVELY_KAFKA_METADATA_MAX_AGE=2s")
	r.produceAccounts(t, accountIDs("a", 0, 20)...)
	w := r.startedWorker(t)
	r.waitApplied(t, 20, time.Minute)
	require.NotContains(t, w.stderr.String(), "partition count changed", "nothing changed yet")

	adm := kafkatest.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := adm.UpdatePartitions(ctx, 4, r.topic)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	waitUntil(t, "the running worker warns", time.Minute, func(context.Context) bool {
		return strings.Contains(w.stderr.String(), "partition count changed")
	})
	require.Contains(t, w.stderr.String(), `"partitions_before":2,"partitions_now":4`)
	waitUntil(t, "the new count recorded", 30*time.Second, func(context.Context) bool {
		return r.db.Count(t, `SELECT partitions FROM topic_partitions WHERE topic = $1`, r.topic) == 4
	})

	// New records spread over four partitions now; all apply, none is
	// taken for another partitioner's.
	r.produceAccounts(t, accountIDs("b", 0, 40)...)
	waitUntil(t, "every account applied", time.Minute, func(context.Context) bool {
		return r.db.Count(t, `SELECT count(*) FROM accounts`) == 60
	})
	require.NotContains(t, w.stderr.String(), "not partitioned by murmur2")
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))

	// Grown while no worker ran: the next start warns.
	resp, err = adm.UpdatePartitions(ctx, 6, r.topic)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	w = r.startedWorker(t)
	require.Contains(t, w.stderr.String(), `"partitions_before":4,"partitions_now":6`)
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	require.Equal(t, int64(6), r.db.Count(t, `SELECT partitions FROM topic_partitions WHERE topic = $1`, r.topic))
}
