package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

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

// boxes is a domain with a prerequisite: items wait for their box. An
// item is valid when its count is > 0; its Validate says so before the
// gate. A "stamp" in an item's data makes its prefetcher give it a time no
// encoder can print (offset +24:00), which only the parked row's encoding
// meets.
type item struct{}

func (item) Validate(ev event.Event) error {
	var d struct {
		Count *int `json:"count"`
		Plain bool `json:"plain"`
	}
	if err := json.Unmarshal(ev.Data, &d); err != nil || d.Count == nil {
		return event.PermanentWithReason("invalid_item", errors.New("an item needs a count"))
	}
	if *d.Count <= 0 {
		if d.Plain {
			return errors.New("count must be > 0") // not Permanent: still the event's fault
		}
		return event.PermanentWithReason("invalid_item", errors.New("count must be > 0"))
	}
	return nil
}

func (item) Prefetch(_ context.Context, _ handlers.Env, ev event.Event) (event.Event, error) {
	var d struct {
		Stamp bool `json:"stamp"`
	}
	_ = json.Unmarshal(ev.Data, &d)
	if d.Stamp {
		ev.Time = time.Date(2024, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600))
	}
	return ev, nil
}

func (item) Handle(_ context.Context, fx *handlers.Effects, ev event.Event) error {
	fx.Exec(nil, `INSERT INTO items (key, box) VALUES ($1, $2)`, ev.Key, ev.Subject)
	return nil
}

func setupBoxes(t *testing.T) (pgtest.DB, *pipeline.Applier) {
	t.Helper()
	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), `
		CREATE TABLE boxes (id text PRIMARY KEY);
		CREATE TABLE items (key text PRIMARY KEY, box text NOT NULL REFERENCES boxes)`)
	require.NoError(t, err)
	var reg handlers.Registry
	reg.HandleFunc("box.opened", func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		fx.Exec(nil, `INSERT INTO boxes (id) VALUES ($1) ON CONFLICT DO NOTHING`, ev.Subject)
		return nil
	})
	reg.Handle("item.added", item{})
	reg.Require(handlers.Prerequisite{Name: "box", ExistsSQL: `SELECT id FROM boxes WHERE id = ANY($1)`,
		CreatedBy: []string{"box.opened"}, Waiting: []string{"item.added"}})
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: topic})
	require.NoError(t, err)
	return db, pipeline.NewApplier(db.Pool, pipeline.Options{
		Decoders: map[string]*event.Decoder{topic: dec}, Handlers: &reg, Logger: zaptest.NewLogger(t),
	})
}

// Validate before the gate, and the event's fault in one place: of items
// for a box that does not exist yet, the invalid ones are dead-lettered in
// the same batch (with their reason, or invalid_payload for a validation
// error without one), one whose parked row cannot be encoded is
// dead-lettered (unencodable) instead of failing the batch for ever, and
// only the valid one is parked — then released and applied when the box
// arrives. Every record has one disposition and the position moves past
// all of them.
func TestInvalidEventsAreDeadLetteredBeforeTheGate(t *testing.T) {
	t.Parallel()
	db, a := setupBoxes(t)
	recs := []*kgo.Record{
		cetest.Record(topic, "i1", "item.added", "b1", 0, map[string]any{"count": -1}),
		cetest.Record(topic, "i2", "item.added", "b1", 0, map[string]any{"count": 0, "plain": true}),
		cetest.Record(topic, "i3", "item.added", "b1", 0, map[string]any{"nothing": true}),
		cetest.Record(topic, "i4", "item.added", "b1", 0, map[string]any{"count": 1, "stamp": true}),
		cetest.Record(topic, "i5", "item.added", "b1", 0, map[string]any{"count": 2}),
	}
	for i, r := range recs {
		r.Offset = int64(i)
	}
	res, err := a.ApplyBatch(context.Background(), consumer.Batch{Group: "g", Topic: topic, Partition: 0, Records: recs})
	require.NoError(t, err, "no error of one event fails its batch")
	require.Equal(t, map[dedupe.Disposition]int{dedupe.DeadLettered: 4, dedupe.Parked: 1}, res.Counts)
	require.Equal(t, map[event.Reason]int{"invalid_item": 2, handlers.ReasonInvalidPayload: 1, pipeline.ReasonUnencodable: 1}, res.DeadLetters)
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM parked_events WHERE state = 'parked'`))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM parked_events WHERE event_key = $1`, cetest.Key("i5")))
	require.Equal(t, int64(4), db.Count(t, `SELECT count(*) FROM dead_letters`))
	require.Equal(t, int64(4), db.Count(t, `SELECT count(*) FROM effectively_claims WHERE disposition = 'dead_lettered'`))
	require.Equal(t, int64(5), db.Count(t, `SELECT next_offset FROM consumer_offsets WHERE consumer_group = 'g' AND topic = $1`, topic))

	box := cetest.Record(topic, "b", "box.opened", "b1", 0, map[string]any{})
	box.Offset = 5
	res, err = a.ApplyBatch(context.Background(), consumer.Batch{Group: "g", Topic: topic, Partition: 0, Records: []*kgo.Record{box}})
	require.NoError(t, err)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 1}, res.Released)
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM items WHERE key = $1`, cetest.Key("i5")))
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM items`))
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM parked_events WHERE state = 'parked'`))
}

// A valid event whose data holds a \u0000 escape (which jsonb refuses)
// parks like any other and comes back with its data byte for byte: the
// parking lot's encoding is never the event's fault.
func TestEventWithNULEscapeParksAndIsReleasedWhole(t *testing.T) {
	t.Parallel()
	db, a := setupBoxes(t)
	_, err := db.Pool.Exec(context.Background(), `ALTER TABLE items ADD COLUMN note bytea`)
	require.NoError(t, err)
	data := `{"count":1,"note":"a\u0000b"}`
	rec := &kgo.Record{Topic: topic, Key: []byte("b2"), Offset: 0, Value: []byte(
		`{"specversion":"1.0","id":"n1","source":"` + cetest.Source + `","type":"item.added","subject":"b2","data":` + data + `}`)}
	res, err := a.ApplyBatch(context.Background(), consumer.Batch{Group: "g", Topic: topic, Partition: 0, Records: []*kgo.Record{rec}})
	require.NoError(t, err)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Parked: 1}, res.Counts)

	box := cetest.Record(topic, "b", "box.opened", "b2", 0, map[string]any{})
	box.Offset = 1
	res, err = a.ApplyBatch(context.Background(), consumer.Batch{Group: "g", Topic: topic, Partition: 0, Records: []*kgo.Record{box}})
	require.NoError(t, err)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 1}, res.Released)
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM items WHERE key = $1`, cetest.Key("n1")))
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM dead_letters`))
}

func TestParkedDataWithNULEscapeRoundTrips(t *testing.T) {
	t.Parallel()
	ev := event.Event{Source: "s", ID: "1", Type: "t", Subject: "x", Key: "k", Data: []byte(`{"note":"a\u0000b","n":1.50}`)}
	raw, err := pipeline.MarshalParked(ev)
	require.NoError(t, err)
	require.NotContains(t, string(raw), `\u0000`, "nothing jsonb refuses")
	got, err := pipeline.UnmarshalParked(raw)
	require.NoError(t, err)
	require.Equal(t, ev.Data, got.Data)
}
