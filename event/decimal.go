package event

import (
	"encoding/json"
	"fmt"
	"math/big"
	"math/bits"
	"strconv"
	"strings"
)

// decimal is a JSON number exactly, as JSON Schema compares numbers:
// ±0.digits × 10^exp, digits without leading or trailing zeros (none for
// zero, which has no sign). Two equal numbers are equal decimals however
// they were written (1, 1.0, 10e-1), and comparing, hashing or telling an
// integer takes time in the digits, never in the exponent: 1e-999999 is
// not a million-digit fraction, as it is to big.Rat.
type decimal struct {
	neg    bool
	digits string
	exp    int64
}

// maxDecimalExponent saturates exponents: beyond it, a number's exponent
// is written in more digits than a payload holds.
const maxDecimalExponent = 1 << 50

// parseDecimal reads s, a valid JSON number.
func parseDecimal(s string) decimal {
	var d decimal
	if strings.HasPrefix(s, "-") {
		d.neg, s = true, s[1:]
	}
	mantissa, exponent, _ := strings.Cut(strings.ToLower(s), "e")
	whole, frac, _ := strings.Cut(mantissa, ".")
	var e int64
	if exponent != "" {
		neg := strings.HasPrefix(exponent, "-")
		for _, c := range strings.TrimLeft(exponent, "+-") {
			if e = e*10 + int64(c-'0'); e > maxDecimalExponent {
				e = maxDecimalExponent
				break
			}
		}
		if neg {
			e = -e
		}
	}
	all := whole + frac
	lead := len(all) - len(strings.TrimLeft(all, "0"))
	d.digits = strings.TrimRight(all[lead:], "0")
	if d.digits == "" {
		return decimal{}
	}
	d.exp = int64(len(whole)-lead) + e
	return d
}

func (d decimal) isZero() bool { return d.digits == "" }

// isInteger says whether d has no fraction.
func (d decimal) isInteger() bool { return int64(len(d.digits)) <= d.exp || d.isZero() }

// cmp compares d and o: -1, 0 or +1.
func (d decimal) cmp(o decimal) int {
	switch {
	case d.isZero() && o.isZero():
		return 0
	case d.isZero():
		return o.sign() * -1
	case o.isZero():
		return d.sign()
	case d.neg != o.neg:
		return d.sign()
	}
	c := 0 // of the magnitudes
	switch {
	case d.exp != o.exp:
		c = 1
		if d.exp < o.exp {
			c = -1
		}
	default:
		c = strings.Compare(d.digits, o.digits)
	}
	if d.neg {
		return -c
	}
	return c
}

func (d decimal) sign() int {
	switch {
	case d.isZero():
		return 0
	case d.neg:
		return -1
	}
	return 1
}

// divisor is a schema's multipleOf, ready to divide by: M and b of
// m = M × 10^b, M in 64 bits when it fits.
type divisor struct {
	m     decimal
	b     int64
	small uint64 // M, or 0 when it needs more than 64 bits
	big   *big.Int
}

func newDivisor(m decimal) *divisor {
	dv := &divisor{m: m, b: m.exp - int64(len(m.digits))}
	if v, err := strconv.ParseUint(m.digits, 10, 64); err == nil {
		dv.small = v
	} else {
		dv.big, _ = new(big.Int).SetString(m.digits, 10)
	}
	return dv
}

// chunks is how many pieces of 18 digits multipleOf reads d in.
func (d decimal) chunks() int { return (len(d.digits) + 17) / 18 }

// multipleOf says whether d is an integer multiple of dv's m (m > 0, a
// schema's: at most 100 characters, within a double's range). d is N ×
// 10^a and m is M × 10^b, N and M integers not divisible by 10: d/m is
// N/M × 10^(a−b), an integer only if a ≥ b (else it needs N divisible by
// a power of ten) and N × 10^(a−b) is divisible by M. N is read 18 digits
// at a time, each a multiplication and a remainder; 10^(a−b) by squaring.
func (d decimal) multipleOf(dv *divisor) bool {
	if d.isZero() {
		return true
	}
	a := d.exp - int64(len(d.digits))
	if a < dv.b {
		return false
	}
	if dv.small != 0 {
		m := dv.small
		var r uint64
		for s := d.digits; s != ""; {
			n := min(len(s), 18)
			chunk, _ := strconv.ParseUint(s[:n], 10, 64)
			r = addMod(mulMod(r, pow10u[n], m), chunk%m, m)
			s = s[n:]
		}
		p, base := uint64(1)%m, uint64(10)%m
		for e := a - dv.b; e > 0; e >>= 1 {
			if e&1 == 1 {
				p = mulMod(p, base, m)
			}
			base = mulMod(base, base, m)
		}
		return mulMod(r, p, m) == 0
	}
	r, chunk := new(big.Int), new(big.Int)
	for s := d.digits; s != ""; {
		n := min(len(s), 18)
		v, _ := strconv.ParseUint(s[:n], 10, 64)
		r.Mul(r, pow10big[n])
		r.Add(r, chunk.SetUint64(v))
		r.Mod(r, dv.big)
		s = s[n:]
	}
	r.Mul(r, new(big.Int).Exp(big.NewInt(10), big.NewInt(a-dv.b), dv.big))
	return r.Mod(r, dv.big).Sign() == 0
}

// The powers of ten below 2^64, as integers and as big.Ints. (Package
// variables, not an init: schemacompile.go's init may run first.)
var pow10u, pow10big = powersOfTen()

func powersOfTen() (u [19]uint64, b [19]*big.Int) {
	p := uint64(1)
	for i := range u {
		u[i] = p
		b[i] = new(big.Int).SetUint64(p)
		p *= 10
	}
	return u, b
}

// mulMod is a × b mod m, for a, b < m... or any a, b when a × b / m fits.
func mulMod(a, b, m uint64) uint64 {
	hi, lo := bits.Mul64(a%m, b%m)
	_, rem := bits.Div64(hi, lo, m)
	return rem
}

// addMod is a + b mod m, for a, b < m.
func addMod(a, b, m uint64) uint64 {
	sum, carry := bits.Add64(a, b, 0)
	if carry != 0 || sum >= m {
		sum -= m
	}
	return sum
}

func pow10(n int) *big.Int {
	return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil)
}

// String writes d in scientific notation: -1.25e3.
func (d decimal) String() string {
	if d.isZero() {
		return "0"
	}
	var b strings.Builder
	if d.neg {
		b.WriteByte('-')
	}
	b.WriteString(d.digits[:1])
	if len(d.digits) > 1 {
		b.WriteByte('.')
		b.WriteString(d.digits[1:])
	}
	if e := d.exp - 1; e != 0 {
		fmt.Fprintf(&b, "e%d", e)
	}
	return b.String()
}

// MarshalJSON writes d as the number it is, for failure messages.
func (d decimal) MarshalJSON() ([]byte, error) { return []byte(d.String()), nil }

// ratDecimal is a schema's number, a fraction whose denominator (it was
// written in decimal) has no prime factors but 2 and 5, as a decimal.
func ratDecimal(r *big.Rat) (decimal, error) {
	den := new(big.Int).Set(r.Denom())
	k := 0
	for _, p := range []int64{2, 5} {
		n := 0
		q, m, bp := new(big.Int), new(big.Int), big.NewInt(p)
		for {
			q.QuoRem(den, bp, m)
			if m.Sign() != 0 {
				break
			}
			den.Set(q)
			n++
		}
		k = max(k, n)
	}
	if den.Cmp(big.NewInt(1)) != 0 {
		return decimal{}, fmt.Errorf("the number %s has no finite decimal form", r.String())
	}
	// r = num × (10^k / denom) × 10^-k, and the middle term is an integer.
	scaled := new(big.Int).Mul(r.Num(), new(big.Int).Quo(pow10(k), r.Denom()))
	return parseDecimal(scaled.String() + "e-" + strconv.Itoa(k)), nil
}

// maxPayloadExponent bounds the decimal exponents of a payload's numbers
// that JSON Schema validation compares: beyond, a number is 0 or infinite
// to any double, and the library's own reading of it gives up.
const maxPayloadExponent = 1_000_000

// payloadDecimals is asDecimals, refusing a number whose exponent is
// beyond ±maxPayloadExponent.
func payloadDecimals(v any) (any, error) {
	v = asDecimals(v)
	var check func(v any) error
	check = func(v any) error {
		switch v := v.(type) {
		case decimal:
			if v.exp > maxPayloadExponent || v.exp < -maxPayloadExponent {
				return fmt.Errorf("the number %s has an exponent beyond ±%d", Excerpt(v.String()), maxPayloadExponent)
			}
		case map[string]any:
			for _, x := range v {
				if err := check(x); err != nil {
					return err
				}
			}
		case []any:
			for _, x := range v {
				if err := check(x); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return v, check(v)
}

// asDecimals replaces, in a value from jsonschema.UnmarshalJSON, every
// number with its decimal.
func asDecimals(v any) any {
	switch v := v.(type) {
	case json.Number:
		return parseDecimal(string(v))
	case map[string]any:
		for k, x := range v {
			v[k] = asDecimals(x)
		}
	case []any:
		for i, x := range v {
			v[i] = asDecimals(x)
		}
	}
	return v
}
