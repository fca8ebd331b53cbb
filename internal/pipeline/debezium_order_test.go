package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/pipeline"
)

const dbzUpdate = `{"before":{"id":1,"name":"customer 1","status":"new"},"after":{"id":1,"name":"customer 1","status":"active"},"source":{"version":"3.6.1.Final","connector":"postgresql","name":"src","ts_ms":1796324500000,"snapshot":"false","db":"source","sequence":"[\"24263000\",\"24263856\"]","schema":"public","table":"customers","txId":747,"lsn":24263856,"xmin":null},"transaction":null,"op":"u","ts_ms":1796324500123}`

const tp = "src.public.customers"

// customersApplier applies tp's Debezium updates with a Go handler that
// upserts customers by the event's own version.
func customersApplier(t *testing.T, db pgtest.DB) *pipeline.Applier {
	tbl := &handlers.Table{Name: "customers", Key: []string{"id"}, Version: "version", Columns: []string{"status"}}
	var reg handlers.Registry
	reg.Table(tbl)
	reg.HandleFunc("public.customers.update", func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		return fx.Upsert(tbl, ev.Version, ev.Subject, "active")
	})
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: tp, Format: event.FormatDebezium})
	require.NoError(t, err)
	return pipeline.NewApplier(db.Pool, pipeline.Options{Decoders: map[string]*event.Decoder{tp: dec}, Handlers: &reg, Logger: zaptest.NewLogger(t)})
}

// A Debezium change gated on a bigint version column is dead-lettered
// (version_column) through the pipeline; the partition keeps moving. The
// fix the dead letter names (ALTER TABLE … TYPE numeric) is seen by the
// running worker: the next change is applied without a restart.
func TestDebeziumChangeOnABigintVersionIsDeadLettered(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE customers (id text PRIMARY KEY, version bigint NOT NULL, status text NOT NULL)`)
	require.NoError(t, err)
	a := customersApplier(t, db)
	rec := &kgo.Record{Topic: tp, Key: []byte(`{"id":1}`), Value: []byte(dbzUpdate), Offset: 0, Timestamp: time.Now()}
	_, err = a.ApplyBatch(ctx, consumer.Batch{Group: "g", Topic: tp, Partition: 0, Records: []*kgo.Record{rec}})
	require.NoError(t, err)
	var reason string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT reason FROM dead_letters`).Scan(&reason))
	require.Equal(t, string(handlers.ReasonVersionColumn), reason)

	_, err = db.Pool.Exec(ctx, `ALTER TABLE customers ALTER COLUMN version TYPE numeric`)
	require.NoError(t, err)
	next := strings.Replace(strings.Replace(dbzUpdate, `\"24263856\"]`, `\"24263999\"]`, 1), `"lsn":24263856`, `"lsn":24263999`, 1)
	rec = &kgo.Record{Topic: tp, Key: []byte(`{"id":1}`), Value: []byte(next), Offset: 1, Timestamp: time.Now()}
	res, err := a.ApplyBatch(ctx, consumer.Batch{Group: "g", Topic: tp, Partition: 0, Records: []*kgo.Record{rec}})
	require.NoError(t, err)
	require.Empty(t, res.DeadLetters, "the change after the ALTER")
	require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM dead_letters`))
	var version string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT version::text FROM customers`).Scan(&version))
	require.Equal(t, "1000000000024263000.00000000000024263999", version)
}

// A version another tool wrote (a fraction the engine does not write)
// does not stall the partition: the statement decides the row.
func TestForeignVersionFractionDoesNotStall(t *testing.T) {
	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), `CREATE TABLE customers (id text PRIMARY KEY, version numeric NOT NULL, status text NOT NULL);
INSERT INTO customers VALUES ('1', 1000000000000000001.5, 'by hand')`)
	require.NoError(t, err)
	a := customersApplier(t, db)
	second := strings.Replace(strings.Replace(dbzUpdate, `\"24263856\"]`, `\"24263999\"]`, 1), `"lsn":24263856`, `"lsn":24263999`, 1)
	recs := []*kgo.Record{
		{Topic: tp, Key: []byte(`{"id":1}`), Value: []byte(dbzUpdate), Offset: 0, Timestamp: time.Now()},
		{Topic: tp, Key: []byte(`{"id":1}`), Value: []byte(second), Offset: 1, Timestamp: time.Now()},
	}
	_, err = a.ApplyBatch(context.Background(), consumer.Batch{Group: "g", Topic: tp, Partition: 0, Records: recs})
	require.NoError(t, err)
	var version, status string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT version::text, status FROM customers`).Scan(&version, &status))
	require.Equal(t, []string{"1000000000024263000.00000000000024263999", "active"}, []string{version, status})
}

func dbzChange(op, seq string, lsn string, status string) string {
	after := `{"id":1,"name":"customer 1","status":"` + status + `"}`
	if op == "d" {
		after = "null"
	}
	snap := "false"
	if op == "r" {
		snap = "true"
	}
	return `{"before":{"id":1,"name":"customer 1","status":"x"},"after":` + after + `,"source":{"version":"3.6.1.Final","connector":"postgresql","name":"src","ts_ms":1,"snapshot":"` + snap + `","db":"source","sequence":"` + seq + `","schema":"public","table":"customers","txId":747,"lsn":` + lsn + `,"xmin":null},"transaction":null,"op":"` + op + `","ts_ms":1}`
}

// After a new snapshot (snapshot.mode always, offsets lost), the first
// transaction streamed carries no last commit: ordered by its LSN, its
// delete outranks what was streamed before the snapshot (review: as 0 it
// was stale, and the replica kept a row the source had deleted).
func TestDebeziumFirstTransactionAfterASnapshotIsApplied(t *testing.T) {
	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), `CREATE TABLE customers (id text PRIMARY KEY, version numeric NOT NULL, status text NOT NULL)`)
	require.NoError(t, err)
	tbl := &handlers.Table{Name: "customers", Key: []string{"id"}, Version: "version", Columns: []string{"status"}, Deletes: true}
	var reg handlers.Registry
	reg.Table(tbl)
	up := func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		ch, err := ev.Change()
		if err != nil {
			return err
		}
		s, _ := ch.After.Get("status")
		return fx.Upsert(tbl, ev.Version, ev.Subject, s.Text())
	}
	reg.HandleFunc("public.customers.update", up)
	reg.HandleFunc("public.customers.read", up)
	reg.HandleFunc("public.customers.delete", func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		return fx.Delete(tbl, ev.Version, ev.Subject)
	})
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: tp, Format: event.FormatDebezium})
	require.NoError(t, err)
	a := pipeline.NewApplier(db.Pool, pipeline.Options{Decoders: map[string]*event.Decoder{tp: dec}, Handlers: &reg, Logger: zaptest.NewLogger(t)})
	vals := []string{
		dbzChange("u", `[\"5000\",\"5100\"]`, "5100", "before-restart"),
		dbzChange("r", `[null,\"9000\"]`, "9000", "snapshot-read"),
		dbzChange("d", `[null,\"9100\"]`, "9100", ""),
	}
	for i, v := range vals {
		rec := &kgo.Record{Topic: tp, Key: []byte(`{"id":1}`), Value: []byte(v), Offset: int64(i), Timestamp: time.Now()}
		_, err := a.ApplyBatch(context.Background(), consumer.Batch{Group: "g", Topic: tp, Partition: 0, Records: []*kgo.Record{rec}})
		require.NoError(t, err)
	}
	require.Zero(t, db.Count(t, `SELECT count(*) FROM customers`), "the source deleted row 1")
}
