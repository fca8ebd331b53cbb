package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/pipeline"
)

const topic = "things"

// setup is the engine alone (its own migrations) with a domain made up
// here: things, set by thing.set, and a target nobody configured.
func setup(t *testing.T) (pgtest.DB, *pipeline.Applier) {
	t.Helper()
	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), `CREATE TABLE things (id text PRIMARY KEY, color text NOT NULL)`)
	require.NoError(t, err)
	return setupOn(t, db, db.Pool)
}

// setupOn is setup's applier on pool, a pool of db's.
func setupOn(t *testing.T, db pgtest.DB, pool *pgxpool.Pool) (pgtest.DB, *pipeline.Applier) {
	t.Helper()
	var reg handlers.Registry
	reg.Target("painter", handlers.Idempotent)
	reg.HandleFunc("thing.set", func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		var d struct {
			Color  string `json:"color"`
			Refuse bool   `json:"refuse"`
			Paint  bool   `json:"paint"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return event.Permanent(err)
		}
		fx.Exec(nil, `INSERT INTO things (id, color) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET color = excluded.color`, ev.Subject, d.Color)
		if d.Refuse {
			// Failing after queueing: the statement above must not apply.
			return event.PermanentWithReason("refused", nil)
		}
		if d.Paint {
			return fx.Send(handlers.Request{Target: "painter", Operation: "painter.paint", Resource: ev.Subject, Method: http.MethodPost})
		}
		return nil
	})
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: topic})
	require.NoError(t, err)
	return db, pipeline.NewApplier(pool, pipeline.Options{
		Decoders: map[string]*event.Decoder{topic: dec}, Handlers: &reg, Logger: zaptest.NewLogger(t),
	})
}

func thing(id, subject string, data map[string]any) *kgo.Record {
	return cetest.Record(topic, id, "thing.set", subject, 0, data)
}

// A handler that fails permanently after queueing statements dead-letters
// its event with none of its effects, and its batch-mates commit; a side
// effect to a declared target without a URL dead-letters the event
// (target_unconfigured) instead of stopping the partition.
func TestPermanentFailureAfterQueueingAppliesNothingOfThatEvent(t *testing.T) {
	t.Parallel()
	db, a := setup(t)
	recs := []*kgo.Record{
		thing("e1", "t1", map[string]any{"color": "red"}),
		thing("e2", "t2", map[string]any{"color": "blue", "refuse": true}),
		thing("e3", "t3", map[string]any{"color": "green", "paint": true}),
		thing("e4", "t4", map[string]any{"color": "black"}),
	}
	for i, r := range recs {
		r.Offset = int64(i)
	}
	res, err := a.ApplyBatch(context.Background(), consumer.Batch{Group: "g", Topic: topic, Partition: 0, Records: recs})
	require.NoError(t, err)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 2, dedupe.DeadLettered: 2}, res.Counts)
	require.Equal(t, map[event.Reason]int{"refused": 1, handlers.ReasonTargetUnconfigured: 1}, res.DeadLetters)
	require.Equal(t, int64(2), db.Count(t, `SELECT count(*) FROM things`))
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM things WHERE id IN ('t2', 't3')`))
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM outbox`))
	require.Equal(t, int64(4), db.Count(t, `SELECT next_offset FROM consumer_offsets WHERE consumer_group = 'g' AND topic = $1`, topic))
}

// lookup is a prefetcher that refuses some events for good.
type lookup struct{}

func (lookup) Prefetch(_ context.Context, _ handlers.Env, ev event.Event) (event.Event, error) {
	if strings.Contains(string(ev.Data), "unknown") {
		return ev, event.PermanentWithReason("lookup_refused", nil)
	}
	return ev, nil
}

func (lookup) Handle(_ context.Context, fx *handlers.Effects, ev event.Event) error {
	fx.Exec(nil, `INSERT INTO things (id, color) VALUES ($1, 'looked-up') ON CONFLICT (id) DO NOTHING`, ev.Subject)
	return nil
}

// An event whose prefetch fails for good is dead-lettered with its claim
// kept as dead_lettered: delivered again, it is a duplicate (no second dead
// letter, no effect).
func TestPermanentPrefetchFailureKeepsTheClaim(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), `CREATE TABLE things (id text PRIMARY KEY, color text NOT NULL)`)
	require.NoError(t, err)
	var reg handlers.Registry
	reg.Handle("thing.looked_up", lookup{})
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: topic})
	require.NoError(t, err)
	a := pipeline.NewApplier(db.Pool, pipeline.Options{Decoders: map[string]*event.Decoder{topic: dec}, Handlers: &reg, Logger: zaptest.NewLogger(t)})
	rec := func(offset int64) *kgo.Record {
		r := cetest.Record(topic, "l1", "thing.looked_up", "t1", 0, map[string]any{"name": "unknown"})
		r.Offset = offset
		return r
	}
	res, err := a.ApplyBatch(context.Background(), consumer.Batch{Group: "g", Topic: topic, Partition: 0, Records: []*kgo.Record{rec(0), rec(1)}})
	require.NoError(t, err)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.DeadLettered: 1, dedupe.Duplicate: 1}, res.Counts)
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM effectively_claims WHERE disposition = 'dead_lettered'`))

	res, err = a.ApplyBatch(context.Background(), consumer.Batch{Group: "g", Topic: topic, Partition: 0, Records: []*kgo.Record{rec(2)}})
	require.NoError(t, err)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Duplicate: 1}, res.Counts)
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM dead_letters`))
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM things`))
}

// As many partitions as the pool has connections apply their first batches
// at once, then again across a rotation of the claims generations: learning
// the open generation must not need a connection of its own (every one is
// held by a partition's transaction), and a batch refused by the closed
// generation is redone in the open one.
func TestClaimsGenerationIsReadWithoutAnotherConnection(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	const partitions = 3
	cfg.MaxConns = partitions
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, a := setupOn(t, db, pool)

	apply := func(round int) {
		// A hang guard: a partition waiting for a connection the others
		// hold fails with the deadline instead of hanging the test.
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, partitions)
		for p := range partitions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var recs []*kgo.Record
				for i := range 20 {
					r := thing(fmt.Sprintf("r%d-p%d-%d", round, p, i), fmt.Sprintf("t%d-%d", p, i), map[string]any{"color": "blue"})
					r.Offset = int64(round*20 + i)
					recs = append(recs, r)
				}
				_, err := a.ApplyBatch(ctx, consumer.Batch{Group: "g", Topic: topic, Partition: int32(p), Records: recs})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "a partition waited for a connection the others hold")
		}
	}
	apply(0)
	closed := db.RotateClaims(t)
	apply(1)
	require.Equal(t, int64(2*partitions*20), db.Count(t, `SELECT count(*) FROM effectively_claims`))
	require.Equal(t, int64(partitions*20), db.Count(t, `SELECT count(*) FROM effectively_claims WHERE generation > $1`, closed), "the second round went into the open generation")
}

// A member that lost its partition but not its database link (a zombie
// cut from the broker) applies its held records late: those the new owner
// already applied are fenced by the partition's stored position — not
// applied again, not even claimed as duplicates — and counted; the rest
// apply once; the position never moves back.
func TestZombieBatchIsFencedByThePosition(t *testing.T) {
	t.Parallel()
	db, owner := setup(t)
	reg := prometheus.NewRegistry()
	zombie := pipeline.NewApplier(db.Pool, zombieOptions(t, reg))
	var recs []*kgo.Record
	for i := range 10 {
		r := thing(fmt.Sprintf("z%d", i), fmt.Sprintf("t%d", i), map[string]any{"color": "red"})
		r.Offset = int64(i)
		recs = append(recs, r)
	}
	batch := func(rs []*kgo.Record) consumer.Batch {
		return consumer.Batch{Group: "g", Topic: topic, Partition: 0, Records: rs}
	}
	position := func() int64 {
		return db.Count(t, `SELECT next_offset FROM consumer_offsets WHERE consumer_group = 'g' AND topic = $1`, topic)
	}
	res, err := owner.ApplyBatch(context.Background(), batch(recs[0:6]))
	require.NoError(t, err)
	require.Equal(t, 0, res.Fenced)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 6}, res.Counts)

	res, err = zombie.ApplyBatch(context.Background(), batch(recs[3:10]))
	require.NoError(t, err)
	require.Equal(t, 3, res.Fenced, "offsets 3-5 were the owner's")
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 4}, res.Counts, "not even claimed again")
	require.Equal(t, int64(10), position())

	res, err = zombie.ApplyBatch(context.Background(), batch(recs[0:3]))
	require.NoError(t, err)
	require.Equal(t, 3, res.Fenced)
	require.Empty(t, res.Counts)
	require.Equal(t, int64(10), position(), "a late batch never moves the position back")
	require.Equal(t, int64(10), db.Count(t, `SELECT count(*) FROM things`))
	require.Equal(t, int64(10), db.Count(t, `SELECT count(*) FROM effectively_claims`), "one claim per event")
	require.Equal(t, 6.0, counterValue(t, reg, "effectively_fenced_records_total"))
}

func zombieOptions(t *testing.T, reg *prometheus.Registry) pipeline.Options {
	t.Helper()
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: topic})
	require.NoError(t, err)
	var h handlers.Registry
	h.HandleFunc("thing.set", func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		fx.Exec(nil, `INSERT INTO things (id, color) VALUES ($1, 'red') ON CONFLICT (id) DO NOTHING`, ev.Subject)
		return nil
	})
	return pipeline.Options{Decoders: map[string]*event.Decoder{topic: dec}, Handlers: &h, Logger: zaptest.NewLogger(t), Metrics: pipeline.NewMetrics(reg)}
}

// counterValue is the sum of the counter family name in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
