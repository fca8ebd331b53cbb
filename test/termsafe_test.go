package test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/pgtest"
)

// A producer controls a dead letter's payload, headers and (through what
// the decoder quotes) its error. dlq show and dlq list print them with the
// control characters escaped: ESC[2J reaches the operator's terminal as
// text, not as "clear the screen".
func TestDLQShowEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t, accounts.Migrations())
	const clear = "\x1b[2J"
	var b pgx.Batch
	deadletter.Queue(&b, deadletter.Letter{
		Group: "g", Topic: "hostile", Partition: 0, Offset: 7,
		RecordKey: []byte("k" + clear),
		Value:     []byte(`{"subject":"` + clear + `"}`),
		Headers:   []deadletter.Header{deadletter.NewHeader("ce_type", []byte("x"+clear))},
		Reason:    "invalid_envelope",
		Error:     "bad attribute " + clear + "\rOK",
	})
	require.NoError(t, db.Pool.SendBatch(context.Background(), &b).Close())
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT id FROM dead_letters`).Scan(&id))

	env := []string{"EFFECTIVELY_POSTGRES_URL=" + db.URL, "EFFECTIVELY_LOG_LEVEL=error"}
	for _, args := range [][]string{{"dlq", "show", fmt.Sprint(id)}, {"dlq", "list"}} {
		code, out, stderr := runCmd(t, env, args...)
		require.Equal(t, 0, code, stderr)
		require.NotContains(t, out, "\x1b", "%v printed a raw ESC", args)
		require.NotContains(t, out, "\r", "%v printed a raw CR", args)
		require.Contains(t, out, `bad attribute \x1b[2J\rOK`, "%v", args)
		if args[1] == "show" {
			require.Contains(t, out, `{"subject":"\x1b[2J"}`)
			// Headers print as JSON (ESC as \u001b), the record key quoted.
			require.True(t, strings.Contains(out, `x\u001b[2J`) || strings.Contains(out, `x\x1b[2J`), "the header, escaped:\n%s", out)
		}
	}
}
