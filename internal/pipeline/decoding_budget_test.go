package pipeline_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"go.uber.org/zap/zaptest"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/pipeline"
)

// bigSchema is an Avro record whose items are one byte each on the wire
// and 15 in JSON: a record of 100,000 items is 100 KB and decodes to
// 1.5 MB of data.
const bigSchema = `{"type":"record","name":"Big","fields":[
	{"name":"id","type":"string"},{"name":"type","type":"string"},{"name":"subject","type":"string"},
	{"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[{"name":"abcdefgh","type":"int"}]}}}]}`

type oneSchema struct{}

func (oneSchema) SchemaByID(_ context.Context, id int) (sr.Schema, error) {
	if id != 1 {
		return sr.Schema{}, &sr.ResponseError{StatusCode: 404, ErrorCode: 40403, Message: "schema not found"}
	}
	return sr.Schema{Schema: bigSchema, Type: sr.TypeAvro}, nil
}

func (oneSchema) SchemaByVersion(context.Context, string, int) (sr.SubjectSchema, error) {
	return sr.SubjectSchema{}, errors.New("not here")
}

func avroString(b []byte, s string) []byte {
	return append(binary.AppendVarint(b, int64(len(s))), s...)
}

// bigRecord is an event of type thing.big for subject, of items items.
func bigRecord(id, subject string, items int, offset int64) *kgo.Record {
	v := []byte{0, 0, 0, 0, 1} // the wire format: magic byte, schema 1
	v = avroString(v, id)
	v = avroString(v, "thing.big")
	v = avroString(v, subject)
	v = binary.AppendVarint(v, int64(items))
	v = append(v, make([]byte, items)...) // each item's int, 0
	v = append(v, 0)
	return &kgo.Record{Topic: topic, Key: []byte(subject), Value: v, Offset: offset}
}

// Records that decode to more data than the process's decoding budget has
// room for are applied in parts, one transaction each, each part's
// position stored with it; a part that fails leaves the parts before it
// committed, and the retried batch fences them: every event applied once.
// Nothing of the budget is held once a batch returns, applied or failed.
func TestLargeDecodedBatchesAreAppliedInParts(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE things (id text PRIMARY KEY, color text NOT NULL)`)
	require.NoError(t, err)
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: topic, Format: event.FormatAvro, Registry: oneSchema{},
		KeyStrategy: event.StrategyField, KeyPointer: "/id", IDPointer: "/id", TypePointer: "/type", SubjectPointer: "/subject"})
	require.NoError(t, err)
	var failOnce atomic.Bool
	failOnce.Store(true)
	var runs atomic.Int64
	var reg handlers.Registry
	reg.HandleFunc("thing.big", func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		var d struct {
			Items []struct {
				N *int `json:"abcdefgh"`
			} `json:"items"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return event.Permanent(err)
		}
		if ev.Subject == "t4" && failOnce.CompareAndSwap(true, false) {
			return errors.New("the database of record is away (transient)")
		}
		runs.Add(1)
		fx.Exec(nil, `INSERT INTO things (id, color) VALUES ($1, $2)`, ev.Subject, fmt.Sprint(len(d.Items)))
		return nil
	})
	// A part takes a quarter of the budget, 4 MiB. Each record may decode
	// to 16 × 100 KB + 64 KiB and its event holds 1.5 MB beyond its
	// bytes: two fit, a third not.
	a := pipeline.NewApplier(db.Pool, pipeline.Options{Decoders: map[string]*event.Decoder{topic: dec}, Handlers: &reg,
		Logger: zaptest.NewLogger(t), MaxDecodedBytes: 16 << 20})
	var recs []*kgo.Record
	for i := range 6 {
		recs = append(recs, bigRecord(fmt.Sprintf("e%d", i), fmt.Sprintf("t%d", i), 100_000, int64(i)))
	}
	b := consumer.Batch{Group: "g", Topic: topic, Partition: 0, Records: recs}
	position := func() int64 {
		return db.Count(t, `SELECT next_offset FROM consumer_offsets WHERE consumer_group = 'g' AND topic = $1`, topic)
	}

	res, err := a.ApplyBatch(ctx, b)
	require.ErrorContains(t, err, "away")
	require.True(t, pipeline.DecodingBudgetFree(a), "a failed batch holds none of the budget")
	require.Equal(t, 2, res.Parts, "two parts committed, the third failed at t4")
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 4}, res.Counts)
	require.Equal(t, int64(4), position(), "each committed part's position is stored with it")
	require.Equal(t, int64(4), db.Count(t, `SELECT count(*) FROM things`))

	res, err = a.ApplyBatch(ctx, b)
	require.NoError(t, err)
	require.True(t, pipeline.DecodingBudgetFree(a))
	require.Equal(t, 3, res.Parts)
	require.Equal(t, 4, res.Fenced, "the parts committed before are fenced by the position")
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 2}, res.Counts)
	require.Equal(t, int64(6), position())
	require.Equal(t, int64(6), db.Count(t, `SELECT count(*) FROM things WHERE color = '100000'`), "every event applied, with all its data")
	require.Equal(t, int64(6), db.Count(t, `SELECT count(*) FROM effectively_claims`), "one claim per event")
	require.Equal(t, int64(6), runs.Load(), "each handler's effect once")

	// Small records of the same format fit in one part.
	var small []*kgo.Record
	for i := range 50 {
		small = append(small, bigRecord(fmt.Sprintf("s%d", i), fmt.Sprintf("u%d", i), 100, int64(6+i)))
	}
	res, err = a.ApplyBatch(ctx, consumer.Batch{Group: "g", Topic: topic, Partition: 0, Records: small})
	require.NoError(t, err)
	require.Equal(t, 1, res.Parts)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 50}, res.Counts)
	require.True(t, pipeline.DecodingBudgetFree(a))
}
