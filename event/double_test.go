package event

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// parseDouble is ParseFloat: on the subnormal range's edges, on random
// mantissas of 1 to 60 digits at every exponent near it, and on the exact
// halfway points between subnormals.
func TestParseDoubleIsParseFloat(t *testing.T) {
	cases := []string{"5e-324", "4.9406564584124654e-324", "2.4703282292062327e-324", "2.4703282292062328e-324", "2.470328229206232720882e-324",
		"2.2250738585072011e-308", "2.2250738585072014e-308", "2.225073858507201e-308", "1e-308", "1e-307", "9.99e-308", "4.4501477170144023e-308",
		"-5e-324", "-0.0", "0e-400", "1e-400", "-1e-325", "0.000000000000000000000000000000000000000000000000000001e-280", "123456789012345678901234567890e-340",
		"1", "1.5", "1e308", "-2.5e-10", "1e-310", "2e-308"}
	// Exactly halfway between two subnormals: (2k+1) × 2^-1075, written out.
	for _, k := range []int64{0, 1, 2, 12345, 1 << 40, 1<<52 - 1} {
		half := new(big.Rat).SetFrac(new(big.Int).SetInt64(2*k+1), new(big.Int).Lsh(big.NewInt(1), 1075))
		cases = append(cases, half.FloatString(1100))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		n := 1 + rng.IntN(60)
		digits := make([]byte, n)
		for i := range digits {
			digits[i] = byte('0' + rng.IntN(10))
		}
		digits[0] = byte('1' + rng.IntN(9))
		cases = append(cases, fmt.Sprintf("%s.%se%d", digits[:1], digits[1:], -300-rng.IntN(30)))
	}
	for _, c := range cases {
		want, wantErr := strconv.ParseFloat(c, 64)
		got, err := parseDouble(c)
		require.Equal(t, wantErr == nil, err == nil, c)
		require.Equal(t, math.Float64bits(want), math.Float64bits(got), "%s: %v, want %v", Excerpt(c), got, want)
	}
}

func TestDecimalMagnitude(t *testing.T) {
	for lit, want := range map[string]int64{"0": 0, "-0.000": 0, "5": 1, "10": 2, "0.5": 0, "0.05": -1, "5e-324": -323, "12.5e3": 5, "-0.001e-3": -5, "1e999999999999999999999": maxDecimalExponent} {
		require.Equal(t, want, decimalMagnitude(lit), lit)
		if lit != "1e999999999999999999999" && strings.Trim(lit, "-0.") != "" {
			require.Equal(t, want, parseDecimal(lit).exp, lit)
		}
	}
}
