package pipeline_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
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

// A domain whose statements PostgreSQL refuses in each of the ways that
// are one event's fault, and in one way that is the deployment's.
func setupWidgets(t *testing.T) (pgtest.DB, *pipeline.Applier) {
	t.Helper()
	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), `
CREATE TABLE widgets (id text PRIMARY KEY, label text NOT NULL, size varchar(3) NOT NULL DEFAULT 's', qty int NOT NULL DEFAULT 0);
CREATE INDEX widgets_label_idx ON widgets (label);
CREATE VIEW small_widgets AS SELECT id, label, qty FROM widgets WHERE qty < 10 WITH CHECK OPTION;`)
	require.NoError(t, err)
	var reg handlers.Registry
	type widget struct {
		Label string `json:"label"`
		Size  string `json:"size"`
		Qty   int    `json:"qty"`
	}
	decode := func(ev event.Event) (widget, error) {
		w := widget{Size: "s"}
		if err := json.Unmarshal(ev.Data, &w); err != nil {
			return w, event.Permanent(err)
		}
		return w, nil
	}
	reg.HandleFunc("widget.set", func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		w, err := decode(ev)
		if err != nil {
			return err
		}
		fx.Exec(nil, `INSERT INTO widgets (id, label, size) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET label = excluded.label, size = excluded.size`, ev.Subject, w.Label, w.Size)
		return nil
	})
	reg.HandleFunc("widget.small", func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		w, err := decode(ev)
		if err != nil {
			return err
		}
		fx.Exec(nil, `INSERT INTO small_widgets (id, label, qty) VALUES ($1, $2, $3)`, ev.Subject, w.Label, w.Qty)
		return nil
	})
	reg.HandleFunc("widget.twice", func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		// Upserts one row twice in one statement: 21000.
		fx.Exec(nil, `INSERT INTO widgets (id, label) VALUES ($1, 'a'), ($1, 'b') ON CONFLICT (id) DO UPDATE SET label = excluded.label`, ev.Subject)
		return nil
	})
	reg.HandleFunc("widget.misdeployed", func(_ context.Context, fx *handlers.Effects, ev event.Event) error {
		// A column the deployment forgot to migrate: 42703.
		fx.Exec(nil, `UPDATE widgets SET colour = 'red' WHERE id = $1`, ev.Subject)
		return nil
	})
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: topic})
	require.NoError(t, err)
	return db, pipeline.NewApplier(db.Pool, pipeline.Options{
		Decoders: map[string]*event.Decoder{topic: dec}, Handlers: &reg, Logger: zaptest.NewLogger(t),
	})
}

func widgetBatch(recs ...*kgo.Record) consumer.Batch {
	for i, r := range recs {
		r.Offset = int64(i)
	}
	return consumer.Batch{Group: "g", Topic: topic, Partition: 0, Records: recs}
}

// Every statement failure that is one event's fault dead-letters that event
// with a reason naming the SQLSTATE class, and its batch-mates commit; the
// position moves past the batch.
func TestEventFaultsAreDeadLetteredByClass(t *testing.T) {
	t.Parallel()
	db, a := setupWidgets(t)
	random := make([]byte, 2400) // 3,200 bytes of base64: no compression gets it under 2,704
	_, _ = rand.Read(random)
	huge := base64.StdEncoding.EncodeToString(random)
	w := func(id, typ, subject string, data map[string]any) *kgo.Record {
		return cetest.Record(topic, id, typ, subject, 0, data)
	}
	res, err := a.ApplyBatch(context.Background(), widgetBatch(
		w("e0", "widget.set", "w0", map[string]any{"label": "ok"}),
		w("e1", "widget.set", "w1", map[string]any{"label": huge}),                 // 54000 index row size
		w("e2", "widget.set", "w2", map[string]any{"label": "ok", "size": "xxl!"}), // 22001 value too long
		w("e3", "widget.small", "w3", map[string]any{"label": "ok", "qty": 50}),    // 44000 outside the view
		w("e4", "widget.twice", "w4", nil),                                         // 21000 a row twice
		w("e5", "widget.small", "w5", map[string]any{"label": "ok", "qty": 5}),
		w("e6", "widget.set", "w6", map[string]any{"label": "ok"}),
	))
	require.NoError(t, err)
	require.True(t, res.Isolated)
	require.Equal(t, map[dedupe.Disposition]int{dedupe.Applied: 3, dedupe.DeadLettered: 4}, res.Counts)
	require.Equal(t, map[event.Reason]int{
		pipeline.ReasonProgramLimitExceeded: 1, pipeline.ReasonDataException: 1,
		pipeline.ReasonWithCheckOptionViolation: 1, pipeline.ReasonCardinalityViolation: 1,
	}, res.DeadLetters)
	require.Equal(t, int64(3), db.Count(t, `SELECT count(*) FROM widgets WHERE id IN ('w0', 'w5', 'w6')`))
	require.Equal(t, int64(3), db.Count(t, `SELECT count(*) FROM widgets`))
	for offset, code := range map[int]string{1: "54000", 2: "22001", 3: "44000", 4: "21000"} {
		require.Equal(t, int64(1), db.Count(t, `SELECT count(*) FROM dead_letters WHERE "offset" = $1 AND error LIKE '%SQLSTATE '||$2||'%'`, offset, code), "offset %d", offset)
	}
	require.Equal(t, int64(7), db.Count(t, `SELECT next_offset FROM consumer_offsets WHERE consumer_group = 'g' AND topic = $1`, topic))
}

// A statement the deployment got wrong (an unmigrated column, a missing
// grant) is nobody's event's fault: the batch fails, is retried, and nothing
// of it is dead-lettered or committed.
func TestDeploymentFaultsAreRetriedNotDeadLettered(t *testing.T) {
	t.Parallel()
	db, a := setupWidgets(t)
	_, err := a.ApplyBatch(context.Background(), widgetBatch(
		cetest.Record(topic, "e0", "widget.set", "w0", 0, map[string]any{"label": "ok"}),
		cetest.Record(topic, "e1", "widget.misdeployed", "w1", 0, nil),
	))
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42703", pgErr.Code)
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM widgets`))
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM dead_letters`))
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM effectively_claims`))
	require.Equal(t, int64(0), db.Count(t, `SELECT count(*) FROM consumer_offsets`))
}
