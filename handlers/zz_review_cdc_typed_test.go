package handlers_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/handling"
)

func zzBatch(t *testing.T, db interface{}, env handlers.Env, evs []event.Event, f func(e *handlers.Effects, ev event.Event) error) ([]string, error) {
	return nil, nil
}

func TestZZReviewForeignVersionText(t *testing.T) {
	for _, stored := range []string{"1000000000000000005.5", "1000000000000000005.000000000000000000001", "NaN", "-1.5"} {
		db, env := newTypedDB(t)
		ctx := context.Background()
		_, err := db.Pool.Exec(ctx, `INSERT INTO changes VALUES ('a', $1::numeric, 'by hand')`, stored)
		require.NoError(t, err)
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		e := handling.NewEffects(env)
		var outs []*handling.Outcome
		for i, s := range []int64{10, 11} {
			outs = append(outs, e.Begin(handlers.Origin{Offset: int64(i)}, event.Event{Version: event.StreamedVersion + 7, Sequence: s}))
			require.NoError(t, e.Effects().Upsert(changes, event.StreamedVersion+7, "a", "x"))
		}
		err = e.Flush(ctx, tx)
		_ = tx.Rollback(ctx)
		t.Logf("stored %s: flush err=%v permanent=%v outs=%v %v", stored, err, event.IsPermanent(err), outs[0].Disposition, outs[1].Disposition)
	}
}
