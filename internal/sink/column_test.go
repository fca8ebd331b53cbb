package sink

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/pgtest"
)

func TestFitsNumeric(t *testing.T) {
	for _, c := range []struct {
		lit         string
		p, s        int
		fits        bool
		description string
	}{
		{"9999999999.99", 12, 2, true, "the largest value"},
		{"10000000000", 12, 2, false, "one integer digit too many"},
		{"9999999999.995", 12, 2, false, "rounds up into a new digit"},
		{"9999999999.994", 12, 2, true, "rounds down"},
		{"-9999999999.999", 12, 2, false, "the sign does not matter"},
		{"0.0000001", 3, 2, true, "rounds to zero"},
		{"000123.4", 4, 1, true, "leading zeros"},
		{"1e10", 12, 2, false, "an exponent"},
		{"1e9", 12, 2, true, "an exponent that fits"},
		{"1e99999999999", 12, 2, false, "a huge exponent"},
		{"1e-99999999999", 12, 2, true, "a tiny exponent"},
		{"0e99999999999", 12, 2, true, "zero with a huge exponent"},
		{".995", 2, 2, false, "rounds to 1.00 in numeric(2,2)"},
		{"12345", 3, -2, true, "a negative scale"},
		{"99951", 3, -2, false, "a negative scale, rounded up"},
	} {
		require.Equal(t, c.fits, fitsNumeric(c.lit, c.p, c.s), "%s in numeric(%d,%d): %s", c.lit, c.p, c.s, c.description)
	}
}

// fitsNumeric agrees with PostgreSQL on random literals and typmods: a
// value it passes is stored, a value it refuses overflows.
func TestFitsNumericAgreesWithPostgres(t *testing.T) {
	db := pgtest.New(t)
	rng := rand.New(rand.NewPCG(7, 8))
	digits := func(n int) string {
		var b strings.Builder
		for range n {
			// Mostly nines and zeros: the edges of rounding.
			b.WriteByte("9990512"[rng.IntN(7)])
		}
		return b.String()
	}
	stored, overflowed := 0, 0
	for range 2000 {
		p := 1 + rng.IntN(8)
		s := rng.IntN(p+1) - rng.IntN(2)
		lit := digits(rng.IntN(5))
		if rng.IntN(2) == 0 {
			lit += "." + digits(1+rng.IntN(5))
		}
		if lit == "" || lit[0] == '.' {
			lit = "0" + lit
		}
		if rng.IntN(4) == 0 {
			lit += fmt.Sprintf("e%d", rng.IntN(9)-4)
		}
		if rng.IntN(2) == 0 {
			lit = "-" + lit
		}
		_, err := db.Pool.Exec(context.Background(), fmt.Sprintf("SELECT $1::numeric::numeric(%d,%d)", p, s), lit)
		var pgErr *pgconn.PgError
		if err != nil {
			require.ErrorAs(t, err, &pgErr, lit)
			require.Equal(t, "22003", pgErr.Code, "%s in numeric(%d,%d): %v", lit, p, s, err)
		}
		require.Equal(t, err == nil, fitsNumeric(lit, p, s), "%s in numeric(%d,%d): PostgreSQL says %v", lit, p, s, err)
		if err == nil {
			stored++
		} else {
			overflowed++
		}
	}
	t.Logf("%d stored, %d overflowed", stored, overflowed)
	require.Greater(t, stored, 200)
	require.Greater(t, overflowed, 200)
}
