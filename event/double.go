package event

import (
	"math"
	"math/big"
	"strconv"
	"strings"
)

// parseDouble is strconv.ParseFloat(s, 64) for a valid JSON number, but
// never on ParseFloat's slow path, which takes 15 to 55 µs a number (a
// megabyte of 5e-324, or of 1.700000000000000038622811e+308, took two to
// four seconds to decode), nor on its bug beyond 800 digits (1 followed by
// 800 zeros and e-800 reads as 0.1). ParseFloat's fast path decides a
// mantissa of up to 19 digits, written without its zeros; a subnormal of
// up to 20 digits is computed exactly (subnormalBits). A longer mantissa
// is cut to 19: when the cut and the cut + 1 round alike, so does every
// mantissa between them. Else the cut is to 800 digits and rounded as an
// exact fraction; if that still straddles two doubles, the 800 digits are
// the tie between them (a tie takes at most 767) and the digits beyond,
// which are not all zeros, round it up.
func parseDouble(s string) (float64, error) {
	sign := 1.0
	if len(s) > 0 && s[0] == '-' {
		sign = -1
	}
	switch mag := decimalMagnitude(s); {
	case mag >= 310: // at least 10^309
		return sign * math.Inf(1), rangeError(s)
	case mag < -324: // below half the smallest subnormal, or zero
		return sign * 0, nil
	}
	d := parseDecimal(s)
	if d.isZero() {
		return sign * 0, nil
	}
	digits, scale := d.digits, d.exp-int64(len(d.digits)) // d = digits × 10^scale
	if len(digits) <= 19 {
		return checkRange(s, sign*shortDouble(digits, scale))
	}
	cut, cutScale := digits[:19], scale+int64(len(digits)-19)
	up, upScale := increment(cut, cutScale)
	if low := shortDouble(cut, cutScale); low == shortDouble(up, upScale) {
		return checkRange(s, sign*low)
	}
	n := min(len(digits), 800)
	cut, cutScale = digits[:n], scale+int64(len(digits)-n)
	low := ratDouble(cut, cutScale)
	if n == len(digits) {
		return checkRange(s, sign*low)
	}
	up, upScale = increment(cut, cutScale)
	high := ratDouble(up, upScale)
	if low == high {
		return checkRange(s, sign*low)
	}
	// The tie between low and high is written in at most 767 digits, so
	// it is the cut or at least the cut + 1: the number, above the cut
	// and below the cut + 1, is above the tie only if the cut is not
	// below it.
	tie := new(big.Rat).SetFloat64(low)
	if math.IsInf(high, 0) {
		tie.SetFrac(new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 1024), new(big.Int).Lsh(big.NewInt(1), 970)), big.NewInt(1))
	} else {
		tie.Add(tie, new(big.Rat).SetFloat64(high)).Quo(tie, big.NewRat(2, 1))
	}
	if decimalRat(cut, cutScale).Cmp(tie) >= 0 {
		return checkRange(s, sign*high)
	}
	return checkRange(s, sign*low)
}

// decimalRat is digits × 10^scale exactly.
func decimalRat(digits string, scale int64) *big.Rat {
	num, _ := new(big.Int).SetString(digits, 10)
	if scale >= 0 {
		return new(big.Rat).SetInt(num.Mul(num, pow10(int(scale))))
	}
	return new(big.Rat).SetFrac(num, pow10(int(-scale)))
}

// maxDouble and overflowTie are math.MaxFloat64 and the tie between it
// and 2^1024, exactly: a number from the one to the other reads as the
// largest double, from the tie on as infinite. ParseFloat's fast path
// gives up on both (the rounding carries into the exponent): 9e308 took
// 30 µs a number.
var (
	maxDouble   = parseDecimal("179769313486231570814527423731704356798070567525844996598917476803157260780028538760589558632766878171540458953514382464234321326889464182768467546703537516986049910576551282076245490090389328944075868508455133942304583236903222948165808559332123348274797826204144723168738177180919299881250404026184124858368")
	overflowTie = parseDecimal("179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792")
)

// nearMax is the double digits × 10^scale reads as when it is at least
// math.MaxFloat64 (ok false below).
func nearMax(digits string, scale int64) (float64, bool) {
	d := decimal{digits: strings.TrimRight(digits, "0"), exp: scale + int64(len(digits))}
	switch {
	case d.exp < maxDouble.exp || d.cmp(maxDouble) < 0:
		return 0, false
	case d.cmp(overflowTie) >= 0:
		return math.Inf(1), true
	}
	return math.MaxFloat64, true
}

// shortDouble is the double nearest digits × 10^scale, digits at most 20.
func shortDouble(digits string, scale int64) float64 {
	if int64(len(digits))+scale <= -307 {
		if bits, ok := subnormalBits(digits, scale); ok {
			return math.Float64frombits(bits)
		}
		// A normal double: ParseFloat's fast path decides it.
	}
	if f, ok := nearMax(digits, scale); ok {
		return f
	}
	f, _ := strconv.ParseFloat(digits+"e"+strconv.FormatInt(scale, 10), 64)
	return f
}

// ratDouble is the double nearest digits × 10^scale, computed exactly.
func ratDouble(digits string, scale int64) float64 {
	if f, ok := nearMax(digits, scale); ok {
		return f
	}
	if int64(len(digits))+scale < -324 {
		return 0
	}
	f, _ := decimalRat(digits, scale).Float64()
	return f
}

// increment is digits + 1 (at the last digit), without trailing zeros.
func increment(digits string, scale int64) (string, int64) {
	b := []byte(digits)
	i := len(b) - 1
	for ; i >= 0 && b[i] == '9'; i-- {
	}
	if i < 0 {
		return "1", scale + int64(len(b))
	}
	b[i]++
	return string(b[:i+1]), scale + int64(len(b)-i-1)
}

func checkRange(s string, f float64) (float64, error) {
	if math.IsInf(f, 0) {
		return f, rangeError(s)
	}
	return f, nil
}

func rangeError(s string) error {
	return &strconv.NumError{Func: "ParseFloat", Num: Excerpt(s), Err: strconv.ErrRange}
}

// subnormalBits rounds digits × 10^scale to a multiple of 2^-1074, ties
// to even: the bits of a double below 2^-1021 (ok false beyond).
func subnormalBits(digits string, scale int64) (uint64, bool) {
	if scale >= 0 || scale < -400 {
		return 0, false
	}
	m, _ := new(big.Int).SetString(digits, 10)
	m.Lsh(m, 1074)
	den := new(big.Int).Exp(big.NewInt(10), big.NewInt(-scale), nil)
	q, r := new(big.Int).QuoRem(m, den, new(big.Int))
	switch c := r.Lsh(r, 1).Cmp(den); {
	case c > 0, c == 0 && q.Bit(0) == 1:
		q.Add(q, big.NewInt(1))
	}
	if q.BitLen() > 53 {
		return 0, false
	}
	return q.Uint64(), true
}

// inDoubleRange says whether lit, a valid JSON number, is within a
// double's range (I-JSON): only one of at least 10^308 needs parsing.
func inDoubleRange[T string | []byte](lit T) bool {
	if decimalMagnitude(lit) <= 308 {
		return true
	}
	_, err := parseDouble(string(lit))
	return err == nil
}

// decimalMagnitude is the e for which |lit|, a valid JSON number, is
// below 10^e and, unless it is zero, at least 10^(e-1); 0 for zero. It
// saturates at ±maxDecimalExponent.
func decimalMagnitude[T string | []byte](lit T) int64 {
	i := 0
	if i < len(lit) && lit[i] == '-' {
		i++
	}
	var e int64
	nonzero := false
	for ; i < len(lit) && lit[i] >= '0' && lit[i] <= '9'; i++ {
		if lit[i] != '0' || nonzero {
			nonzero = true
			e++
		}
	}
	if i < len(lit) && lit[i] == '.' {
		for i++; i < len(lit) && lit[i] >= '0' && lit[i] <= '9'; i++ {
			if nonzero {
				continue
			}
			if lit[i] != '0' {
				nonzero = true
			} else {
				e--
			}
		}
	}
	if !nonzero {
		return 0
	}
	if i < len(lit) && (lit[i] == 'e' || lit[i] == 'E') {
		i++
		neg := i < len(lit) && lit[i] == '-'
		if i < len(lit) && (lit[i] == '-' || lit[i] == '+') {
			i++
		}
		var x int64
		for ; i < len(lit); i++ {
			if x = x*10 + int64(lit[i]-'0'); x > maxDecimalExponent {
				x = maxDecimalExponent
				break
			}
		}
		if neg {
			x = -x
		}
		e = max(min(e+x, maxDecimalExponent), -maxDecimalExponent)
	}
	return e
}
