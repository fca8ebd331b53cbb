package event

import (
	"crypto/sha256"
	"encoding/base64"
	binenc "encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
)

// avroCodec transcodes Avro binary of one writer's schema to JSON. The
// schema is parsed by hamba/avro (names, namespaces, references, logical
// types) and compiled once into a tree of readers, one per schema node, so
// a record is read in one pass with no intermediate Go values: what a
// record costs is its bytes, not its schema's reflection.
type avroCodec struct {
	schema avro.Schema
	root   *avroNode
}

// avroNode reads one value of its schema node and appends its JSON.
type avroNode struct {
	read func(r *avroReader) error
}

// avroReader is the state of one transcoding.
type avroReader struct {
	b     []byte
	i     int
	out   []byte
	depth int
	max   int // output bound
	// branches is, in reading order, the index of the branch taken by
	// each union with more than one non-null type (uvarints): the JSON has
	// no wrapper naming it, so two values of two branches (a Credit and a
	// Debit with one amount, a string and bytes) can write the same JSON.
	// The event's hash covers them too. Each index was read from the
	// payload in at least as many bytes, so this never outgrows it.
	branches []byte
}

// errAvroShort is a payload that ends inside a value.
var errAvroShort = errors.New("the payload ends inside a value (truncated?)")

// maxDecimalBytes bounds a decimal's two's-complement bytes, and
// maxDecimalDigits its schema's precision (as many digits as 128 bytes
// hold): more is not a decimal any schema needs, and a scale of a million
// would pad every value with a million zeros.
const (
	maxDecimalBytes  = 128
	maxDecimalDigits = 309
)

func newAvroCodec(text string, refs []reference) (*avroCodec, error) {
	// A cache per schema: named types of one schema ID never meet another
	// ID's (two versions of one record name differ), and hamba's default
	// cache is global.
	cache := &avro.SchemaCache{}
	for _, ref := range refs {
		if _, err := avro.ParseWithCache(ref.text, "", cache); err != nil {
			return nil, fmt.Errorf("reference %s: %w", Excerpt(ref.name), err)
		}
	}
	s, err := avro.ParseWithCache(text, "", cache)
	if err != nil {
		return nil, err
	}
	c := &avroCodec{schema: s}
	named := map[string]*avroNode{}
	c.root, err = compileAvro(s, named)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// toJSON transcodes one payload: exactly one value of the schema, no byte
// more or less. branches is, for the event's hash, the SHA-256 in hex of
// the branches taken by unions the JSON does not tell apart (see
// avroReader.branches), "" when there are none.
func (c *avroCodec) toJSON(payload []byte, maxJSON int) (js []byte, branches string, err error) {
	r := &avroReader{b: payload, out: make([]byte, 0, 2*len(payload)+64), max: maxJSON}
	if err := c.root.read(r); err != nil {
		return nil, "", r.fail(err)
	}
	if r.i != len(r.b) {
		return nil, "", decodeErr(ReasonSchemaMismatch, "the payload does not match its Avro schema: %d bytes follow the value", len(r.b)-r.i)
	}
	if len(r.branches) > 0 {
		sum := sha256.Sum256(r.branches)
		branches = hex.EncodeToString(sum[:])
	}
	return r.out, branches, nil
}

// fail turns a reading error into the record's DecodeError.
func (r *avroReader) fail(err error) error {
	var de *DecodeError
	if errors.As(err, &de) {
		return de
	}
	return decodeErr(ReasonSchemaMismatch, "the payload does not match its Avro schema at byte %d: %v", r.i, err)
}

func (r *avroReader) long() (int64, error) {
	var u uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if r.i >= len(r.b) {
			return 0, errAvroShort
		}
		c := r.b[r.i]
		r.i++
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1), nil
		}
	}
	return 0, errors.New("a variable-length integer runs past 64 bits")
}

func (r *avroReader) int() (int32, error) {
	v, err := r.long()
	if err != nil {
		return 0, err
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fmt.Errorf("the int %d is outside 32 bits", v)
	}
	return int32(v), nil
}

func (r *avroReader) bytes() ([]byte, error) {
	n, err := r.long()
	switch {
	case err != nil:
		return nil, err
	case n < 0:
		return nil, fmt.Errorf("a negative length %d", n)
	case n > int64(len(r.b)-r.i):
		return nil, errAvroShort
	}
	b := r.b[r.i : r.i+int(n)]
	r.i += int(n)
	return b, nil
}

func (r *avroReader) fixed(n int) ([]byte, error) {
	if n > len(r.b)-r.i {
		return nil, errAvroShort
	}
	b := r.b[r.i : r.i+n]
	r.i += n
	return b, nil
}

// grow checks the output bound.
func (r *avroReader) grow() error {
	if len(r.out) > r.max {
		return decodeErr(ReasonTooLarge, "the payload decodes to more than %d bytes of JSON", r.max)
	}
	return nil
}

func (r *avroReader) enter() error {
	r.depth++
	if r.depth > MaxNesting {
		return decodeErr(ReasonNestingTooDeep, "the payload nests records, arrays and maps deeper than %d levels", MaxNesting)
	}
	return nil
}

func (r *avroReader) str(s []byte) error {
	if !utf8.Valid(s) {
		return errors.New("a string is not valid UTF-8")
	}
	r.out = appendCanonicalString(r.out, string(s))
	return nil
}

// compileAvro builds the reader of s. named holds the named types compiled
// so far, so that a recursive type refers to its own node.
func compileAvro(s avro.Schema, named map[string]*avroNode) (*avroNode, error) {
	switch s := s.(type) {
	case *avro.RefSchema:
		if n := named[s.Schema().FullName()]; n != nil {
			return n, nil
		}
		return compileAvro(s.Schema(), named)
	case *avro.RecordSchema:
		n := &avroNode{}
		named[s.FullName()] = n
		type field struct {
			prefix []byte
			node   *avroNode
		}
		fields := make([]field, len(s.Fields()))
		for i, f := range s.Fields() {
			fn, err := compileAvro(f.Type(), named)
			if err != nil {
				return nil, err
			}
			p := []byte{','}
			if i == 0 {
				p = p[:0]
			}
			p = append(appendCanonicalString(p, f.Name()), ':')
			fields[i] = field{p, fn}
		}
		n.read = func(r *avroReader) error {
			if err := r.enter(); err != nil {
				return err
			}
			r.out = append(r.out, '{')
			for _, f := range fields {
				r.out = append(r.out, f.prefix...)
				if err := f.node.read(r); err != nil {
					return err
				}
				// Each field: a byte of enum index can be a long
				// symbol, and a record can have thousands of them.
				if err := r.grow(); err != nil {
					return err
				}
			}
			r.out = append(r.out, '}')
			r.depth--
			return r.grow()
		}
		return n, nil
	case *avro.EnumSchema:
		symbols := make([][]byte, len(s.Symbols()))
		for i, sym := range s.Symbols() {
			symbols[i] = appendCanonicalString(nil, sym)
		}
		n := &avroNode{read: func(r *avroReader) error {
			i, err := r.int()
			if err != nil {
				return err
			}
			if i < 0 || int(i) >= len(symbols) {
				return fmt.Errorf("enum index %d is outside the %d symbols", i, len(symbols))
			}
			r.out = append(r.out, symbols[i]...)
			return nil
		}}
		named[s.FullName()] = n // one node however often the enum is referred to
		return n, nil
	case *avro.ArraySchema:
		item, err := compileAvro(s.Items(), named)
		if err != nil {
			return nil, err
		}
		return &avroNode{read: func(r *avroReader) error {
			return r.blocks('[', ']', func(first bool) error {
				if !first {
					r.out = append(r.out, ',')
				}
				return item.read(r)
			})
		}}, nil
	case *avro.MapSchema:
		value, err := compileAvro(s.Values(), named)
		if err != nil {
			return nil, err
		}
		return &avroNode{read: func(r *avroReader) error {
			return r.blocks('{', '}', func(first bool) error {
				if !first {
					r.out = append(r.out, ',')
				}
				k, err := r.bytes()
				if err != nil {
					return err
				}
				if err := r.str(k); err != nil {
					return err
				}
				r.out = append(r.out, ':')
				return value.read(r)
			})
		}}, nil
	case *avro.UnionSchema:
		branches := make([]*avroNode, len(s.Types()))
		nonNull := 0
		for i, t := range s.Types() {
			b, err := compileAvro(t, named)
			if err != nil {
				return nil, err
			}
			branches[i] = b
			if t.Type() != avro.Null {
				nonNull++
			}
		}
		ambiguous := nonNull > 1
		return &avroNode{read: func(r *avroReader) error {
			i, err := r.long()
			if err != nil {
				return err
			}
			if i < 0 || i >= int64(len(branches)) {
				return fmt.Errorf("union branch %d is outside its %d types", i, len(branches))
			}
			if ambiguous {
				r.branches = binenc.AppendUvarint(r.branches, uint64(i))
			}
			return branches[i].read(r)
		}}, nil
	case *avro.FixedSchema:
		if err := checkDecimal(s.Logical()); err != nil {
			return nil, err
		}
		size := s.Size()
		conv := bytesConverter(s.Logical())
		if l := s.Logical(); l != nil && l.Type() == avro.Duration {
			conv = appendDuration
		}
		return &avroNode{read: func(r *avroReader) error {
			b, err := r.fixed(size)
			if err != nil {
				return err
			}
			r.out, err = conv(r.out, b)
			return err
		}}, nil
	case *avro.NullSchema:
		return &avroNode{read: func(r *avroReader) error {
			r.out = append(r.out, "null"...)
			return nil
		}}, nil
	case *avro.PrimitiveSchema:
		return compilePrimitive(s)
	}
	return nil, fmt.Errorf("unsupported Avro schema node %s", s.Type())
}

// blocks reads an array's or a map's blocks: a count, negative when a
// byte size follows, until a zero count.
func (r *avroReader) blocks(open, close byte, item func(first bool) error) error {
	if err := r.enter(); err != nil {
		return err
	}
	r.out = append(r.out, open)
	first := true
	for {
		n, err := r.long()
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if n < 0 {
			if n == math.MinInt64 {
				return errors.New("a block count out of range")
			}
			n = -n
			if _, err := r.long(); err != nil { // the block's size in bytes
				return err
			}
		}
		for ; n > 0; n-- {
			if err := item(first); err != nil {
				return err
			}
			first = false
			// Items may take no bytes (null, an empty record): the output
			// bound is what ends a block count of billions.
			if err := r.grow(); err != nil {
				return err
			}
		}
	}
	r.out = append(r.out, close)
	r.depth--
	return nil
}

func compilePrimitive(s *avro.PrimitiveSchema) (*avroNode, error) {
	var logical avro.LogicalType
	if l := s.Logical(); l != nil {
		logical = l.Type()
	}
	switch s.Type() {
	case avro.Null:
		return &avroNode{read: func(r *avroReader) error {
			r.out = append(r.out, "null"...)
			return nil
		}}, nil
	case avro.Boolean:
		return &avroNode{read: func(r *avroReader) error {
			b, err := r.fixed(1)
			switch {
			case err != nil:
				return err
			case b[0] == 0:
				r.out = append(r.out, "false"...)
			case b[0] == 1:
				r.out = append(r.out, "true"...)
			default:
				return fmt.Errorf("a boolean byte 0x%02x is neither 0 nor 1", b[0])
			}
			return nil
		}}, nil
	case avro.Int:
		format := func(b []byte, v int32) ([]byte, error) { return strconv.AppendInt(b, int64(v), 10), nil }
		switch logical {
		case avro.Date:
			format = func(b []byte, v int32) ([]byte, error) {
				t := time.Unix(int64(v)*86400, 0).UTC()
				if y := t.Year(); y < 1 || y > 9999 {
					return nil, fmt.Errorf("the date %d (days since 1970) is outside the years 1 to 9999", v)
				}
				b = append(b, '"')
				b = t.AppendFormat(b, time.DateOnly)
				return append(b, '"'), nil
			}
		case avro.TimeMillis:
			format = func(b []byte, v int32) ([]byte, error) {
				if v < 0 || v >= 86_400_000 {
					return nil, fmt.Errorf("time-millis %d is outside a day", v)
				}
				return appendTimeOfDay(b, int64(v)*1e6, 3), nil
			}
		}
		return &avroNode{read: func(r *avroReader) error {
			v, err := r.int()
			if err != nil {
				return err
			}
			r.out, err = format(r.out, v)
			return err
		}}, nil
	case avro.Long:
		format := func(b []byte, v int64) ([]byte, error) { return strconv.AppendInt(b, v, 10), nil }
		switch logical {
		case avro.TimeMicros:
			format = func(b []byte, v int64) ([]byte, error) {
				if v < 0 || v >= 86_400_000_000 {
					return nil, fmt.Errorf("time-micros %d is outside a day", v)
				}
				return appendTimeOfDay(b, v*1e3, 6), nil
			}
		case avro.TimestampMillis:
			format = timestampFormat(time.UnixMilli, "2006-01-02T15:04:05.000Z07:00")
		case avro.TimestampMicros:
			format = timestampFormat(time.UnixMicro, "2006-01-02T15:04:05.000000Z07:00")
		case avro.LocalTimestampMillis:
			format = timestampFormat(time.UnixMilli, "2006-01-02T15:04:05.000")
		case avro.LocalTimestampMicros:
			format = timestampFormat(time.UnixMicro, "2006-01-02T15:04:05.000000")
		}
		return &avroNode{read: func(r *avroReader) error {
			v, err := r.long()
			if err != nil {
				return err
			}
			r.out, err = format(r.out, v)
			return err
		}}, nil
	case avro.Float:
		return &avroNode{read: func(r *avroReader) error {
			b, err := r.fixed(4)
			if err != nil {
				return err
			}
			r.out = appendFloat(r.out, float64(math.Float32frombits(binenc.LittleEndian.Uint32(b))), 32)
			return nil
		}}, nil
	case avro.Double:
		return &avroNode{read: func(r *avroReader) error {
			b, err := r.fixed(8)
			if err != nil {
				return err
			}
			r.out = appendFloat(r.out, math.Float64frombits(binenc.LittleEndian.Uint64(b)), 64)
			return nil
		}}, nil
	case avro.String:
		return &avroNode{read: func(r *avroReader) error {
			b, err := r.bytes()
			if err != nil {
				return err
			}
			return r.str(b)
		}}, nil
	case avro.Bytes:
		if err := checkDecimal(s.Logical()); err != nil {
			return nil, err
		}
		conv := bytesConverter(s.Logical())
		return &avroNode{read: func(r *avroReader) error {
			b, err := r.bytes()
			if err != nil {
				return err
			}
			r.out, err = conv(r.out, b)
			return err
		}}, nil
	}
	return nil, fmt.Errorf("unsupported Avro type %s", s.Type())
}

// bytesConverter appends bytes or a fixed as JSON: a decimal as a number,
// anything else in base64.
func bytesConverter(l avro.LogicalSchema) func([]byte, []byte) ([]byte, error) {
	if d, ok := l.(*avro.DecimalLogicalSchema); ok {
		scale := d.Scale()
		return func(out, b []byte) ([]byte, error) {
			out = append(out, '"')
			out, err := appendDecimal(out, b, scale)
			return append(out, '"'), err
		}
	}
	return func(out, b []byte) ([]byte, error) {
		out = append(out, '"')
		out = base64.StdEncoding.AppendEncode(out, b)
		return append(out, '"'), nil
	}
}

// appendDecimal appends the two's-complement big-endian unscaled value b
// with scale fractional digits: its exact digits, "-12345.67".
func appendDecimal(out, b []byte, scale int) ([]byte, error) {
	if len(b) == 0 {
		return nil, errors.New("a decimal has no bytes")
	}
	if len(b) > maxDecimalBytes {
		return nil, fmt.Errorf("a decimal of %d bytes, more than %d", len(b), maxDecimalBytes)
	}
	v := new(big.Int).SetBytes(b)
	if negative := b[0]&0x80 != 0; negative {
		v.Sub(new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))), v)
		out = append(out, '-')
	}
	digits := v.String()
	if scale <= 0 {
		return append(out, digits...), nil
	}
	if pad := scale + 1 - len(digits); pad > 0 { // 0.05: at least one integer digit
		digits = strings.Repeat("0", pad) + digits
	}
	out = append(out, digits[:len(digits)-scale]...)
	out = append(out, '.')
	return append(out, digits[len(digits)-scale:]...), nil
}

// checkDecimal refuses a decimal no value can need: more digits than
// maxDecimalDigits, a scale outside 0 to its precision.
func checkDecimal(l avro.LogicalSchema) error {
	d, ok := l.(*avro.DecimalLogicalSchema)
	if !ok {
		return nil
	}
	if p, sc := d.Precision(), d.Scale(); p < 1 || p > maxDecimalDigits || sc < 0 || sc > p {
		return fmt.Errorf("decimal(%d, %d): want a precision from 1 to %d and a scale from 0 to the precision", p, sc, maxDecimalDigits)
	}
	return nil
}

// appendDuration appends Avro's duration (three little-endian unsigned
// 32-bit counts) as an object.
func appendDuration(out, b []byte) ([]byte, error) {
	if len(b) != 12 {
		return nil, fmt.Errorf("a duration of %d bytes, not 12", len(b))
	}
	out = append(out, `{"months":`...)
	out = strconv.AppendUint(out, uint64(binenc.LittleEndian.Uint32(b)), 10)
	out = append(out, `,"days":`...)
	out = strconv.AppendUint(out, uint64(binenc.LittleEndian.Uint32(b[4:])), 10)
	out = append(out, `,"milliseconds":`...)
	out = strconv.AppendUint(out, uint64(binenc.LittleEndian.Uint32(b[8:])), 10)
	return append(out, '}'), nil
}

func timestampFormat(from func(int64) time.Time, layout string) func([]byte, int64) ([]byte, error) {
	return func(b []byte, v int64) ([]byte, error) {
		t := from(v).UTC()
		if y := t.Year(); y < 1 || y > 9999 {
			return nil, fmt.Errorf("the timestamp %d is outside the years 1 to 9999", v)
		}
		b = append(b, '"')
		b = t.AppendFormat(b, layout)
		return append(b, '"'), nil
	}
}

// appendTimeOfDay appends ns nanoseconds after midnight as a quoted time
// with digits fractional digits.
func appendTimeOfDay(b []byte, ns int64, digits int) []byte {
	layout := "15:04:05.000"
	if digits == 6 {
		layout = "15:04:05.000000"
	}
	b = append(b, '"')
	b = time.Unix(0, ns).UTC().AppendFormat(b, layout)
	return append(b, '"')
}

// appendFloat appends f as a JSON number, or NaN and the infinities as
// strings (JSON has no number for them).
func appendFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, bits)
}
