package sink_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pgtest"
	"github.com/effectively-io/effectively/internal/sink"
)

func zzSinks() []config.Sink {
	return []config.Sink{{
		Name: "replica", Topic: "cdc", Types: []string{"c.update"}, Table: "replica", Mode: config.SinkUpsert,
		Key: []string{"id"}, Version: "version",
		Columns: []config.SinkColumn{{Name: "id", From: "subject"}, {Name: "version", From: "resourceversion"}, {Name: "status", From: "/status"}},
	}, {
		Name: "replica-deletes", Topic: "cdc", Types: []string{"c.delete"}, Table: "replica", Mode: config.SinkDelete,
		Key: []string{"id"}, Version: "version",
		Columns: []config.SinkColumn{{Name: "id", From: "subject"}, {Name: "version", From: "resourceversion"}},
	}}
}

// Finding: the first transaction streamed after a new snapshot
// (snapshot.mode always / when_needed / offsets reset) carries
// source.sequence [null, lsn]: Version = 10^18 + 0, below every change
// streamed before the snapshot.
func TestZZReviewFirstTxnAfterReSnapshotIsStale(t *testing.T) {
	db, reg, err := setup(t, `CREATE TABLE replica (id text PRIMARY KEY, version numeric NOT NULL, status text);`, zzSinks())
	require.NoError(t, err)
	ch := func(typ string, commit, lsn int64, status string) handling.Outcome {
		ev := event.Event{Type: typ, Key: "k" + status, Subject: "1", Version: event.StreamedVersion + commit, Sequence: lsn, Data: []byte(`{"status":"` + status + `"}`)}
		return apply(t, db, reg, "cdc", ev)
	}
	// before the restart: streamed, lastCommit 5000
	require.Equal(t, dedupe.Applied, ch("c.update", 5000, 5100, "before-restart").Disposition)
	// re-snapshot read at 9000 (stale by design)
	read := event.Event{Type: "c.update", Key: "read", Subject: "1", Version: 9000, Data: []byte(`{"status":"read"}`)}
	require.Equal(t, dedupe.Stale, apply(t, db, reg, "cdc", read).Disposition)
	// first txn streamed after the snapshot: [null,"9100"] -> commit 0
	out := ch("c.update", 0, 9100, "after-restart")
	t.Logf("first change after re-snapshot: %v", out.Disposition)
	out2 := ch("c.update", 9200, 9300, "second-txn")
	t.Logf("second txn after re-snapshot: %v", out2.Disposition)
}

// Finding: a sink with Topic "" whose types come only from a CloudEvents
// topic is refused at start-up when any other topic is Debezium.
func TestZZReviewTopiclessSinkRefused(t *testing.T) {
	sinks := []config.Sink{{
		Name: "orders", Types: []string{"order.updated"}, Table: "orders", Mode: config.SinkUpsert,
		Key: []string{"id"}, Version: "version",
		Columns: []config.SinkColumn{{Name: "id", From: "subject"}, {Name: "version", From: "resourceversion"}, {Name: "status", From: "/status"}},
	}}
	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), `CREATE TABLE orders (id text PRIMARY KEY, version bigint NOT NULL, status text)`)
	require.NoError(t, err)
	var reg handlers.Registry
	set, err := sink.Register(&reg, sinks)
	require.NoError(t, err)
	topics := map[string]string{"shop": "cloudevents", "src.public.customers": "debezium"}
	err = set.Check(context.Background(), db.Pool, &reg, func(topic string) bool {
		for tp, f := range topics {
			if (topic == "" || tp == topic) && f == "debezium" {
				return true
			}
		}
		return false
	})
	t.Logf("check: %v", err)
	_ = outbox.Expiry{}
}
