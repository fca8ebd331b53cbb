package event

import (
	"math"
	"math/big"
	"strconv"
)

// parseDouble is strconv.ParseFloat(s, 64) for a valid JSON number, but
// for the subnormal range (below 2.2250738585072014e-308), where
// ParseFloat leaves its fast path for a decimal one that takes 15 µs a
// number: a megabyte of 5e-324 took 2.3 s a parse. There the double is
// the mantissa × 2^1074 / 10^-exponent rounded to the nearest integer (ties
// to even) as its bits, computed exactly on at most 20 digits; a longer
// mantissa is cut to 19, and when the cut and the cut + 1 round alike so
// does every mantissa between them, else (a tie within the cut digits,
// which takes hundreds of digits to write) ParseFloat decides.
func parseDouble(s string) (float64, error) {
	// Below 10^-307 some doubles are subnormal; below 10^-324, all round
	// to zero.
	if decimalMagnitude(s) > -307 {
		return strconv.ParseFloat(s, 64)
	}
	d := parseDecimal(s)
	if d.isZero() {
		return strconv.ParseFloat(s, 64)
	}
	sign := 1.0
	if d.neg {
		sign = -1
	}
	if d.exp < -324 {
		return sign * 0, nil
	}
	digits, scale := d.digits, d.exp-int64(len(d.digits)) // d = digits × 10^scale
	if len(digits) <= 20 {
		bits, ok := subnormalBits(digits, scale, false)
		if ok {
			return sign * math.Float64frombits(bits), nil
		}
		return strconv.ParseFloat(s, 64)
	}
	cut, cutScale := digits[:19], scale+int64(len(digits)-19)
	low, okLow := subnormalBits(cut, cutScale, false)
	high, okHigh := subnormalBits(cut, cutScale, true)
	if okLow && okHigh && low == high {
		return sign * math.Float64frombits(low), nil
	}
	return strconv.ParseFloat(s, 64)
}

// subnormalBits rounds (digits, plus one when up) × 10^scale to a multiple
// of 2^-1074, ties to even: the bits of a double below 2^-1021 (ok false
// beyond).
func subnormalBits(digits string, scale int64, up bool) (uint64, bool) {
	if scale >= 0 || scale < -400 {
		return 0, false
	}
	m, _ := new(big.Int).SetString(digits, 10)
	if up {
		m.Add(m, big.NewInt(1))
	}
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
	_, err := strconv.ParseFloat(string(lit), 64)
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
