package event

import (
	"bufio"
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/canonicaltree"
)

// The streaming canonicaliser against the tree it replaced
// (internal/canonicaltree, the code as it was): for any input, the same
// syntax error, the same I-JSON issues in the same order, the same canonical
// bytes and payload hash, and JSON pointers that find the same values.

// requireMatchesTree checks data, and ptr resolved against it, both ways,
// and reports whether data canonicalises (is I-JSON).
func requireMatchesTree(t *testing.T, data []byte, ptr string) bool {
	t.Helper()
	for _, depth := range []int{MaxNesting, MaxNesting + 1} {
		doc, err := parseJSON(data, depth)
		tree, terr := canonicaltree.Parse(data, depth)
		if terr != nil {
			require.Error(t, err, "the tree refuses %q: %v", data, terr)
			msg, off, tooDeep, ok := canonicaltree.SyntaxError(terr)
			require.True(t, ok)
			var se *syntaxError
			require.ErrorAs(t, err, &se)
			require.Equal(t, msg, se.msg, "%q", data)
			require.Equal(t, off, se.off, "%q", data)
			require.Equal(t, tooDeep, se.tooDeep, "%q", data)
			continue
		}
		require.NoError(t, err, "the tree accepts %q", data)
		want := tree.Issues()
		require.Len(t, doc.issues, len(want), "%q", data)
		for i, is := range want {
			require.Equal(t, jsonIssue{member: is.Member, inMember: is.InMember, msg: is.Msg}, doc.issues[i], "%q", data)
		}
		w := canonWriter{doc: doc}
		require.Equal(t, len(data), skipSpace(data, w.value(doc.root)))
		if len(want) == 0 {
			// With issues the text is never canonicalised, and the
			// tree's order of repeated names was its sort's whim.
			require.Equal(t, string(tree.Canonical()), string(w.b), "%q", data)
		}

		if p, perr := parsePointer(ptr); perr == nil {
			raw, found := tree.Resolve(p.tokens)
			v, ok := doc.resolve(p, doc.root)
			require.Equal(t, found, ok, "pointer %q in %q", ptr, data)
			if found {
				require.Equal(t, string(raw), string(doc.raw(v)), "pointer %q in %q", ptr, data)
			}
		}
	}

	got, err := Canonicalize(data)
	want, werr := canonicaltree.Canonicalize(data)
	if werr != nil {
		require.EqualError(t, err, werr.Error(), "%q", data)
	} else {
		require.NoError(t, err, "%q", data)
		require.Equal(t, string(want), string(got), "%q", data)
		doc, err := parseJSON(data, MaxNesting)
		require.NoError(t, err)
		wantSum, err := canonicaltree.PayloadHash("item.created", "item-1\n\"", 7, data)
		require.NoError(t, err)
		require.Equal(t, wantSum, payloadHash("item.created", "item-1\n\"", 7, doc, doc.root, ""), "%q", data)
	}
	return werr == nil
}

func FuzzCanonicalMatchesTree(f *testing.F) {
	for _, tc := range decodeCases() {
		f.Add(tc.rec.Value, tc.cfg.KeyPointer)
	}
	for _, s := range []string{
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
		`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew","1":"One","\ud83d\ude00":"Emoji","\u0080":"Control","\u00f6":"o"}`,
		`[-0,1e21,1e-7,9007199254740993,1.5e300,5e-324]`, `"\ud800"`, `{"a":1,"a":2}`, `1e400`,
		`{"a":{"x":1,"x":2,"y":"\ud800"},"a":0,"b":[1e999],"c":"ok"}`,
		`{"b":{"z":1,"y":2},"a":[{"d":0,"c":1}],"\u0061\ud83d\ude00":{"\uffff":[],"\ud83d\ude01":{}}}`,
		`{"x\u0000":1,"x":2,"x\/":3,"x/":4}`,
	} {
		f.Add([]byte(s), "/a/0")
	}
	for _, in := range benchInputs() {
		if len(in.data) < 1<<16 {
			f.Add(in.data, "/child/z/j/1")
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, ptr string) {
		_ = requireMatchesTree(t, data, ptr)
	})
}

// TestCanonicalMatchesTreeOnCorpora replays every input of every fuzz
// corpus of the package (testdata/fuzz, findings of all targets) and the
// decoder's table cases through both.
func TestCanonicalMatchesTreeOnCorpora(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "*", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var inputs [][]byte
	for _, f := range files {
		args := readCorpusFile(t, f)
		require.NotEmpty(t, args, f)
		inputs = append(inputs, args...)
	}
	for _, tc := range decodeCases() {
		inputs = append(inputs, tc.rec.Value)
	}
	for _, in := range benchInputs() {
		if len(in.data) < 1<<16 {
			inputs = append(inputs, in.data)
		}
	}
	for _, in := range inputs {
		_ = requireMatchesTree(t, in, "/data")
	}
	t.Logf("%d inputs from %d corpus files", len(inputs), len(files))
}

// readCorpusFile returns the []byte and string arguments of a file of a
// Go fuzz corpus ("go test fuzz v1").
func readCorpusFile(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	require.True(t, sc.Scan())
	require.Equal(t, "go test fuzz v1", sc.Text(), path)
	var args [][]byte
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		for _, prefix := range []string{"[]byte(", "string("} {
			if inner, ok := strings.CutPrefix(line, prefix); ok {
				s, err := strconv.Unquote(strings.TrimSuffix(inner, ")"))
				require.NoError(t, err, "%s: %s", path, line)
				args = append(args, []byte(s))
			}
		}
	}
	require.NoError(t, sc.Err())
	return args
}

// TestPayloadHashStreamsLikeTree hashes values whose canonical form is
// longer than the hash's buffer, flushed between values, inside strings
// and past strings longer than the buffer.
func TestPayloadHashStreamsLikeTree(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("abcdefghij", 1000)
	var members strings.Builder
	members.WriteByte('{')
	for i := range 1000 {
		if i > 0 {
			members.WriteByte(',')
		}
		members.WriteString(`"m` + strconv.Itoa(999-i) + `":"` + strings.Repeat("é\\u00e9\\n", 5) + `"`)
	}
	members.WriteByte('}')
	var numbers strings.Builder
	numbers.WriteByte('[')
	for i := range 20_000 {
		if i > 0 {
			numbers.WriteByte(',')
		}
		numbers.WriteString(genNumbers[i%len(genNumbers)])
	}
	numbers.WriteByte(']')
	for _, in := range []string{
		`"` + long + `"`,
		`["` + long + `","` + long + `\n"]`,
		`{"a":"` + strings.Repeat(long+`\t\u0001\"`, 5) + `","b":[` + strings.Repeat(`{"y":1,"x":[]},`, 2000) + `{}]}`,
		members.String(),
		strings.ReplaceAll(strings.ReplaceAll(numbers.String(), "1e400,", ""), "-1e999,", ""),
	} {
		require.Greater(t, len(in), 2*hashChunk)
		require.True(t, requireMatchesTree(t, []byte(in), "/m5"), "%.80s", in)
		// The buffer stays bounded: about full, it is hashed.
		doc, err := parseJSON([]byte(in), MaxNesting)
		require.NoError(t, err)
		w := newHashWriter(doc)
		w.value(doc.root)
		require.LessOrEqual(t, cap(w.b), 2*hashChunk)
		w.release()
	}
}

// TestAppendES6MatchesTree compares the number serialisation with the old
// one on random doubles of every magnitude.
func TestAppendES6MatchesTree(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		f := math.Float64frombits(rng.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		require.Equal(t, canonicaltree.FormatES6(f), string(appendES6(nil, f)), "%b", math.Float64bits(f))
	}
}

// TestCanonicalMatchesTreeShapes compares generated documents of every
// shape: nesting, escapes, surrogate pairs and lone ones, repeated names
// at every depth, big and small numbers, issues past the limit.
func TestCanonicalMatchesTreeShapes(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	valid := 0
	for range 5000 {
		var b bytes.Buffer
		genJSON(rng, &b, 0)
		if requireMatchesTree(t, b.Bytes(), "/a") {
			valid++
		}
	}
	t.Logf("%d of 5000 generated documents were I-JSON", valid)
	require.Greater(t, valid, 1000)
	// More issues than the parser keeps, in and out of members.
	_ = requireMatchesTree(t, []byte("{"+strings.Repeat(`"a":"\ud800",`, 40)+`"b":[`+strings.Repeat(`1e999,`, 40)+`0]}`), "/b")
	var many strings.Builder
	many.WriteByte('{')
	for i := range 40 {
		many.WriteString(`"k` + strconv.Itoa(i) + `":{"x":1,"x":2},`)
	}
	many.WriteString(`"k0":0}`)
	_ = requireMatchesTree(t, []byte(many.String()), "/k1/x")
	// Repeated names found at their object's close, after issues that
	// follow them in the text, in arrays and in members, past the limit.
	for _, in := range []string{
		`[{"a":1,"b":"\ud800","a":2,"c":1e999},` + strings.Repeat(`"\udc00",`, 40) + `{"x":{"y":0,"y":1}}]`,
		strings.Repeat(`[{"a":1,"a":2,"b":"\ud800"},`, 40) + `0` + strings.Repeat(`]`, 40),
		`{"m":[{"a":1,"b":"\ud800","a":2}],"m":{"z":1e999},"n":"\ud800",` + strings.Repeat(`"x":{"q":1,"q":2},`, 40) + `"\ud800":0}`,
	} {
		_ = requireMatchesTree(t, []byte(in), "/0")
	}
}

var genNames = []string{`a`, `b`, `\u0061`, `é`, `\u00e9`, `\ud83d\ude00`, `\ufb33`, `\uffff`, ``, `a\u0000`, `\ud800`, `\udc00x`, `\\`, `\/`, `/`, `\n`, `aa`, `\ud83d\ude01`}

// genName returns a name fragment, sometimes with a digit after it; of the
// lone surrogates, one in ten is kept.
func genName(rng *rand.Rand) string {
	for {
		n := genNames[rng.IntN(len(genNames))]
		if strings.Contains(n, `\ud800`) || strings.Contains(n, `\udc00`) {
			if rng.IntN(10) != 0 {
				continue
			}
		}
		if rng.IntN(2) == 0 {
			n += strconv.Itoa(rng.IntN(3))
		}
		return n
	}
}

var genNumbers = []string{`0`, `-0`, `1`, `-17`, `0.1`, `1e21`, `1E+2`, `1.5e-7`, `1e400`, `-1e999`, `1e-400`, `9007199254740993`,
	`333333333.33333329`, `5e-324`, `0.000001`, `100e-2`, `123456789012345678901234567890`,
	`4.50`, `2e-3`, `1e-27`, `-5e-324`, `1.7976931348623157e308`, `295147905179352825856`, `0.1e1`, `12.0`}

func genJSON(rng *rand.Rand, b *bytes.Buffer, depth int) {
	ws := func() {
		if rng.IntN(4) == 0 {
			b.WriteString(" \n\t\r"[:rng.IntN(4)+1])
		}
	}
	ws()
	switch n := rng.IntN(10); {
	case n < 3 && depth < 6:
		b.WriteByte('{')
		for i := range rng.IntN(6) {
			if i > 0 {
				b.WriteByte(',')
			}
			ws()
			b.WriteString(`"` + genName(rng) + `"`)
			ws()
			b.WriteByte(':')
			genJSON(rng, b, depth+1)
		}
		ws()
		b.WriteByte('}')
	case n < 5 && depth < 6:
		b.WriteByte('[')
		for i := range rng.IntN(5) {
			if i > 0 {
				b.WriteByte(',')
			}
			genJSON(rng, b, depth+1)
		}
		b.WriteByte(']')
	case n < 7:
		b.WriteString(`"` + genName(rng) + genName(rng) + `"`)
	case n < 9:
		b.WriteString(genNumbers[rng.IntN(len(genNumbers))])
	default:
		b.WriteString([]string{"true", "false", "null"}[rng.IntN(3)])
	}
	ws()
}
