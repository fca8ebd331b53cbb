package event

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/stretchr/testify/require"
)

func TestCanonicalizeRFC8785(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{
			// RFC 8785, section 3.2.2 (the input), 3.2.3 (the output).
			name: "section 3.2.2",
			in: `{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			// RFC 8785, section 3.2.3: sorting by UTF-16 code units.
			name: "section 3.2.3",
			in: `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\"," +
				"\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{name: "scalars", in: ` "a" `, want: `"a"`},
		{name: "literals", in: `[true,false,null]`, want: `[true,false,null]`},
		{name: "empty containers", in: `{ "a" : [ ] , "b" : { } }`, want: `{"a":[],"b":{}}`},
		{name: "nested sort", in: `{"b":{"z":1,"y":2},"a":[{"d":0,"c":1}]}`, want: `{"a":[{"c":1,"d":0}],"b":{"y":2,"z":1}}`},
		{name: "escapes", in: `"\b\f\n\r\t\u0001\u001f\u007f\u2028/\u00e9"`, want: "\"\\b\\f\\n\\r\\t\\u0001\\u001f\u007f\u2028/é\""},
		{name: "negative zero", in: `[-0, -0.0, 0e5]`, want: `[0,0,0]`},
		{name: "integers keep digits", in: `[1, -17, 9007199254740993, 123456789012345678901234567890]`, want: `[1,-17,9007199254740993,123456789012345678901234567890]`},
		{name: "exponents", in: `[1e21, 1E+2, 1.5e-7, 0.000001, 100e-2]`, want: `[1e+21,100,1.5e-7,0.000001,1]`},
		{name: "underflow is zero", in: `1e-400`, want: `0`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Canonicalize([]byte(tc.in))
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
			again, err := Canonicalize(got)
			require.NoError(t, err)
			require.Equal(t, string(got), string(again), "not a fixed point")
		})
	}
}

func TestCanonicalizeRefuses(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		``, ` `, `{`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `'a'`, `01`, `1.`, `.5`, `+1`, `1e`, `-`,
		`NaN`, `Infinity`, `tru`, `nul`, `"a`, `"\x"`, `"\u12"`, `"\u12G4"`, "\"\t\"", `[1] [2]`,
		"\xff", `"` + "\xc3" + `"`,
		// I-JSON.
		`{"a":1,"a":2}`, `[{"a":1,"a":1}]`, `"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud800x"`, `1e400`, `-1e400`,
		strings.Repeat("[", MaxNesting+1) + strings.Repeat("]", MaxNesting+1),
	} {
		_, err := Canonicalize([]byte(in))
		require.Error(t, err, "%q", in)
	}
	_, err := Canonicalize([]byte(strings.Repeat("[", MaxNesting) + strings.Repeat("]", MaxNesting)))
	require.NoError(t, err)
}

// TestFormatES6 checks the number serialization against the IEEE 754 test
// values of RFC 8785, Appendix B.
func TestFormatES6(t *testing.T) {
	t.Parallel()
	tests := []struct{ bits, want string }{
		{"0000000000000000", "0"},
		{"8000000000000000", "0"},
		{"0000000000000001", "5e-324"},
		{"8000000000000001", "-5e-324"},
		{"7fefffffffffffff", "1.7976931348623157e+308"},
		{"ffefffffffffffff", "-1.7976931348623157e+308"},
		{"4340000000000000", "9007199254740992"},
		{"c340000000000000", "-9007199254740992"},
		{"4430000000000000", "295147905179352830000"},
		{"44b52d02c7e14af5", "9.999999999999997e+22"},
		{"44b52d02c7e14af6", "1e+23"},
		{"44b52d02c7e14af7", "1.0000000000000001e+23"},
		{"444b1ae4d6e2ef4e", "999999999999999700000"},
		{"444b1ae4d6e2ef4f", "999999999999999900000"},
		{"444b1ae4d6e2ef50", "1e+21"},
		{"3eb0c6f7a0b5ed8c", "9.999999999999997e-7"},
		{"3eb0c6f7a0b5ed8d", "0.000001"},
		{"41b3de4355555553", "333333333.3333332"},
		{"41b3de4355555554", "333333333.33333325"},
		{"41b3de4355555555", "333333333.3333333"},
		{"41b3de4355555556", "333333333.3333334"},
		{"41b3de4355555557", "333333333.33333343"},
		{"becbf647612f3696", "-0.0000033333333333333333"},
		{"43143ff3c1cb0959", "1424953923781206.2"},
	}
	for _, tc := range tests {
		bits, err := strconv.ParseUint(tc.bits, 16, 64)
		require.NoError(t, err)
		f := math.Float64frombits(bits)
		require.Equal(t, tc.want, string(appendES6(nil, f)), tc.bits)

		// Through the parser, written with an exponent so that the literal
		// is read as a double, the same text comes out.
		lit := string(appendES6(nil, f))
		if !strings.ContainsAny(lit, ".e") {
			lit += ".0"
		}
		got, err := Canonicalize([]byte(lit))
		require.NoError(t, err)
		require.Equal(t, tc.want, string(got), lit)
	}
}

// compareStrings orders two strings as compareNames orders member names.
func compareStrings(a, b string) int {
	qa, _ := json.Marshal(a)
	qb, _ := json.Marshal(b)
	data := append(append(qa, ' '), qb...)
	return compareNames(data, 0, len(qa)+1)
}

func TestCompareUTF16(t *testing.T) {
	t.Parallel()
	// In UTF-16, U+1F600 is D83D DE00, which precedes FB33; Go's byte
	// order (UTF-8, code point order) says the opposite.
	require.Negative(t, compareStrings("\U0001F600", "\uFB33"))
	require.Greater(t, "\U0001F600", "\uFB33")
	require.Negative(t, compareStrings("a", "ab"))
	require.Zero(t, compareStrings("ab", "ab"))
	require.Positive(t, compareStrings("b", "a"))
	require.Negative(t, compareStrings("\U0001F600", "\U0001F601"))
}

func TestParseJSONIssues(t *testing.T) {
	t.Parallel()
	doc, err := parseJSON([]byte(`{"a":{"x":1,"x":2,"y":"\ud800"},"a":0,"b":[1e999],"c":"ok"}`), MaxNesting)
	require.NoError(t, err)
	// One issue for member a (the first), one for the repeated name a at
	// the top, one for member b.
	require.Len(t, doc.issues, 3)
	msg, ok := doc.memberIssue("a")
	require.True(t, ok)
	require.Contains(t, msg, `duplicate member name "x"`)
	msg, ok = doc.rootIssue()
	require.True(t, ok)
	require.Contains(t, msg, `duplicate member name "a"`)
	msg, ok = doc.memberIssue("b")
	require.True(t, ok)
	require.Contains(t, msg, "beyond the range")
	_, ok = doc.memberIssue("c")
	require.False(t, ok)

	// Issues are bounded.
	doc, err = parseJSON([]byte("["+strings.Repeat(`"\ud800",`, 100)+"0]"), MaxNesting)
	require.NoError(t, err)
	require.Len(t, doc.issues, maxIssues)

	// A syntax error after an I-JSON issue still fails the parse.
	_, err = parseJSON([]byte(`{"a":1,"a":2,}`), MaxNesting)
	require.Error(t, err)
}

func TestCompareUTF16MatchesDefinition(t *testing.T) {
	t.Parallel()
	words := []string{"", "a", "ab", "b", "é", "e\u0301", "\u20ac", "\ufb33", "\uffff", "\U0001F600", "\U0001F601",
		"a\U0001F600", "a\uffff", "\U00010000", "\ud7ff", "\ue000", "x\U0010FFFF", "x\ue000"}
	for _, a := range words {
		for _, b := range words {
			want := slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
			require.Equal(t, want, compareStrings(a, b), "%q vs %q", a, b)
		}
	}
}

// BenchmarkParseArrayOfNumbers reports the cost of the worst shape per
// byte for the tree: a 400 kB array of one-digit numbers.
func BenchmarkParseArrayOfNumbers(b *testing.B) {
	data := []byte("[" + strings.Repeat("1,", 200_000) + "1]")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseJSON(data, MaxNesting); err != nil {
			b.Fatal(err)
		}
	}
}
