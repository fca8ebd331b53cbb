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
	// Just above and below the midpoints between doubles, in 20 to 40
	// digits, across the range: ParseFloat's slow path.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		f := math.Float64frombits(rng.Uint64() & 0x7fefffffffffffff)
		mid := new(big.Rat).SetFloat64(f)
		next := new(big.Rat).SetFloat64(math.Nextafter(f, math.Inf(1)))
		mid.Add(mid, next).Quo(mid, big.NewRat(2, 1))
		text := new(big.Float).SetPrec(2000).SetRat(mid).Text('e', 19+rng.IntN(21))
		cases = append(cases, text)
	}
	for range 20000 {
		n := 1 + rng.IntN(60)
		digits := make([]byte, n)
		for i := range digits {
			digits[i] = byte('0' + rng.IntN(10))
		}
		digits[0] = byte('1' + rng.IntN(9))
		cases = append(cases, fmt.Sprintf("%s.%se%d", digits[:1], digits[1:], -330+rng.IntN(640)))
	}
	// Beyond 800 digits ParseFloat is wrong (1 and 800 zeros, e-800, reads
	// as 0.1): there the exact fraction decides.
	tie := "1.00000000000000011102230246251565404236316680908203125" // between 1 and the next double
	cases = append(cases, tie, tie+strings.Repeat("0", 800)+"1", "-"+tie+strings.Repeat("0", 900)+"1e-5", "1"+strings.Repeat("0", 800)+"e-800", "2"+strings.Repeat("0", 900)+"e-900", "1"+strings.Repeat("0", 1000)+"e-600", "0."+strings.Repeat("0", 900)+"1e800")
	// Near the largest double and the tie above it, where ParseFloat's
	// fast path gives up (30 µs a number), and just below ties beyond 800
	// digits (…4999…, whose nines carry into the tie).
	maxTie := "1.797693134862315807937289714053034150799341327100378269361737789804449682927647509466490179775872070963302864166928879109465555478519404026306574886715058206819089020007083836762738548458177115317644757302700698555713669596228429148198608349364752927190741684443655107043427115596995080930428801779041744977920000000000000000000000000000000000"
	cases = append(cases, "9e308", "2e308", "1.8e308", "99e307", "1.797693134862315808e308", "1.7976931348623157e308", "1.7976931348623158e308", "-1.7976931348623159e308",
		maxTie[:330]+"e308", "1.7976931348623158079372897140530341507993413271003782693617377898044496829276475094664901797758720709633028641669288791094655554785194040263065748867150582068190890200070838367627385484581771153176447573027006985557136695962284291481986083493647529271907416844436551070434271155969950809304288017790417449779"+strings.Repeat("4", 10)+strings.Repeat("9", 900)+"e308",
		"1.000000000000000333066907387546962127089500427246093749"+strings.Repeat("9", 1000), "1.00000000000000011102230246251565404236316680908203124"+strings.Repeat("9", 900)+"8")
	for range 300 { // random doubles' ties, just below and just above, in 850 to 1,000 digits
		f := math.Float64frombits(rng.Uint64() & 0x7fefffffffffffff)
		mid := new(big.Rat).SetFloat64(f)
		mid.Add(mid, new(big.Rat).SetFloat64(math.Nextafter(f, math.Inf(1)))).Quo(mid, big.NewRat(2, 1))
		text := new(big.Float).SetPrec(4000).SetRat(mid).Text('e', 850+rng.IntN(150))
		mant, exp, _ := strings.Cut(text, "e")
		mant = strings.TrimRight(mant, "0")
		below := []byte(mant) // the tie less one unit in its last place, then nines
		for i := len(below) - 1; i >= 0; i-- {
			if below[i] == '.' {
				continue
			}
			if below[i] > '0' {
				below[i]--
				break
			}
			below[i] = '9'
		}
		cases = append(cases, string(below)+strings.Repeat("9", 60)+"e"+exp, mant+"0001e"+exp)
	}
	for _, c := range cases {
		exact, _ := new(big.Rat).SetString(c)
		want, _ := exact.Float64()
		if strings.HasPrefix(c, "-") && want == 0 {
			want = math.Copysign(0, -1)
		}
		var wantErr error
		if math.IsInf(want, 0) {
			wantErr = strconv.ErrRange
		}
		if len(c) < 800 {
			pf, pfErr := strconv.ParseFloat(c, 64)
			require.Equal(t, math.Float64bits(want), math.Float64bits(pf), "%s: the exact fraction is ParseFloat's", Excerpt(c))
			require.Equal(t, wantErr == nil, pfErr == nil, c)
		}
		got, err := parseDouble(c)
		require.Equal(t, wantErr == nil, err == nil, c)
		require.Equal(t, math.Float64bits(want), math.Float64bits(got), "%s: %v, want %v", Excerpt(c), got, want)
	}
	require.True(t, inDoubleRange("1"+strings.Repeat("0", 1000)+"e-700"))
	require.False(t, inDoubleRange("1"+strings.Repeat("0", 1000)+"e-600"), "1e400")
	require.False(t, inDoubleRange("1.8e308"))
	require.True(t, inDoubleRange("1.7976931348623157e308"))
}

func TestDecimalMagnitude(t *testing.T) {
	for lit, want := range map[string]int64{"0": 0, "-0.000": 0, "5": 1, "10": 2, "0.5": 0, "0.05": -1, "5e-324": -323, "12.5e3": 5, "-0.001e-3": -5, "1e999999999999999999999": maxDecimalExponent} {
		require.Equal(t, want, decimalMagnitude(lit), lit)
		if lit != "1e999999999999999999999" && strings.Trim(lit, "-0.") != "" {
			require.Equal(t, want, parseDecimal(lit).exp, lit)
		}
	}
}
