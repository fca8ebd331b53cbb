package console

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/pgtest"
)

// An action whose text PostgreSQL would refuse as is — a result cut
// through a character at the limit, a NUL, bytes that are not UTF-8 (a
// form field is any bytes) — is still recorded: the text is cleaned and
// cut on a character boundary, and the row reads back.
func TestRecordActionStoresAnyText(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()

	// "€" (3 bytes) straddles the limit, before the NUL is replaced by the
	// two bytes \0 (two of its bytes in) and after (one byte in).
	const head = "dropped: \x00 "
	result := head + strings.Repeat("x", maxResultBytes-len(head)-2) + "€ and more"
	require.Equal(t, maxResultBytes-2, strings.Index(result, "€"))
	require.False(t, utf8.ValidString(result[:maxResultBytes]), "a byte cut keeps part of the character")
	// What PostgreSQL does with such text (what made the log lose an
	// action): refused, invalid byte sequence.
	for _, raw := range []string{result[:maxResultBytes], "a\x00b", "a\xffb"} {
		_, err := db.Pool.Exec(ctx, `INSERT INTO operator_actions (operator, action, target, outcome, result) VALUES ('o', 'a', 't', 'ok', $1)`, raw)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%q: %v", raw, err)
		require.Equal(t, "22021", pgErr.Code, "%q", raw)
	}

	a := Action{Operator: "al\x00ice", Action: "parked.drop", Target: "resource caf\xe9 \xff", Outcome: OutcomeOK, Result: result}
	require.NoError(t, RecordAction(ctx, db.Pool, a))
	as, err := ListActions(ctx, db.Pool, 10)
	require.NoError(t, err)
	require.Len(t, as, 1, "the action is in the log")
	got := as[0]
	require.Equal(t, `al\0ice`, got.Operator)
	require.Equal(t, "parked.drop", got.Action)
	require.Equal(t, "resource caf\uFFFD \uFFFD", got.Target)
	require.Equal(t, OutcomeOK, got.Outcome)
	want := `dropped: \0 ` + strings.Repeat("x", maxResultBytes-len(head)-2)
	require.Len(t, want, maxResultBytes-1, "cleaned, the character starts one byte before the limit")
	require.Equal(t, want+"…", got.Result, "cleaned, then cut before the character it would split")
	require.True(t, utf8.ValidString(got.Result))
}
