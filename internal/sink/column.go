package sink

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/internal/handling"
)

// column reads one value of a row from an event.
type column struct {
	name     string
	typ      string   // text, bigint, numeric, boolean, timestamptz, date, jsonb
	from     string   // an attribute, or "" for a pointer or a constant
	pointer  []string // the JSON pointer's reference tokens
	raw      string   // the pointer as configured
	constant any      // the value's constant, already typed
	optional bool

	// Limits of the live column, set by fit.
	maxLen  int   // characters (varchar(n), char(n)); 0: none
	min     int64 // integer range
	max     int64
	float   bool // a double precision or real column takes a float64
	uuid    bool // a uuid column: text must be a UUID
	date    bool // a date column: a timestamptz value must not be a number
	integer bool // integer range checked
	// numeric(precision, scale): precision 0 is an unconstrained numeric.
	precision, scale int
}

func newColumn(sinkName string, c config.SinkColumn) (*column, error) {
	col := &column{name: c.Name, typ: c.TypeOf(), optional: c.Optional}
	switch {
	case c.Value != "":
		v, err := convertString(col.typ, c.Value)
		if err != nil {
			return nil, fmt.Errorf("sink %s: column %s: the constant value %v", sinkName, c.Name, err)
		}
		col.constant = v
	case strings.HasPrefix(c.From, "/"):
		col.raw = c.From
		for _, tok := range strings.Split(c.From[1:], "/") {
			col.pointer = append(col.pointer, strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~"))
		}
	default:
		col.from = c.From
	}
	return col, nil
}

func (c *column) source() string {
	switch {
	case c.raw != "":
		return c.raw
	case c.from != "":
		return c.from
	}
	return "a constant"
}

// read returns the column's value for ev, whose data doc holds: nil (NULL)
// for a missing optional value.
func (c *column) read(ev event.Event, doc *event.Document) (any, error) {
	if c.constant != nil {
		return c.constant, nil
	}
	var v any
	var err error
	if c.pointer != nil {
		jv, _ := doc.Get(c.pointer...) // absent: the zero Value, read as null
		v, err = c.readJSON(jv)
	} else {
		v, err = c.readAttribute(ev)
	}
	switch {
	case err != nil:
		return nil, err
	case v == nil && !c.optional:
		return nil, errors.New("is missing or null")
	case v == nil:
		return nil, nil
	}
	return c.limit(v)
}

func (c *column) readAttribute(ev event.Event) (any, error) {
	var s string
	switch c.from {
	case "subject":
		s = ev.Subject
	case "id":
		s = ev.ID
	case "type":
		s = ev.Type
	case "source":
		s = ev.Source
	case "key":
		s = ev.Key
	case "resourceversion":
		if ev.Version == 0 {
			return nil, nil
		}
		if c.typ == "bigint" {
			return ev.Version, nil // the gate adds the Sequence (Effects.Upsert)
		}
		s = handling.VersionText(ev.Version, ev.Sequence)
	case "time":
		if ev.Time.IsZero() {
			return nil, nil
		}
		if c.typ == "timestamptz" {
			return ev.Time, nil
		}
		s = ev.Time.Format(time.RFC3339Nano)
	}
	if s == "" {
		return nil, nil
	}
	return convertString(c.typ, s)
}

// readJSON converts a value of the event's data. A jsonb column takes the
// value's text as it is in the data (a sub-slice, not a copy: the data
// outlives the batch's statements), never a re-serialisation of it.
func (c *column) readJSON(v event.Value) (any, error) {
	k := v.Kind()
	switch {
	case k == event.KindNull:
		return nil, nil
	case c.typ == "jsonb":
		return v.Raw(), nil
	}
	switch k {
	case event.KindString:
		return convertString(c.typ, v.Text())
	case event.KindNumber:
		lit := v.Text()
		switch c.typ {
		case "text", "numeric":
			return lit, nil
		case "bigint":
			n, err := strconv.ParseInt(lit, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s is not an integer that fits 64 bits", event.Excerpt(lit))
			}
			return n, nil
		case "date": // days since 1970: Debezium, Kafka Connect, Avro
			days, err := strconv.ParseInt(lit, 10, 64)
			if err != nil || days < minDay || days > maxDay {
				return nil, fmt.Errorf("%s is not a date as days since 1970 (an integer from %d to %d: the years 1 to 9999)", event.Excerpt(lit), minDay, maxDay)
			}
			return time.Unix(days*86400, 0).UTC(), nil
		case "timestamptz": // seconds since the Unix epoch
			if c.date {
				// Every binary format writes a date as days since 1970 —
				// Debezium's io.debezium.time.Date, Kafka Connect's Date,
				// Avro's date — and read as seconds it would be a day in
				// January 1970 without a word.
				return nil, fmt.Errorf("is the number %s, written to a date column: a date as a number is days since 1970 (Debezium, Kafka Connect, Avro) — read it as type: date — and a time as seconds is written to a timestamp column", event.Excerpt(lit))
			}
			f, err := strconv.ParseFloat(lit, 64)
			if err != nil || math.IsInf(f, 0) || math.Abs(f) > 1e11 {
				return nil, fmt.Errorf("%s is not a time in seconds since 1970", event.Excerpt(lit))
			}
			sec, frac := math.Modf(f)
			return time.Unix(int64(sec), int64(frac*1e9)).UTC(), nil
		}
		return nil, fmt.Errorf("is the number %s, not a %s", event.Excerpt(lit), c.typ)
	case event.KindBool:
		switch c.typ {
		case "boolean":
			return v.Text() == "true", nil
		case "text":
			return v.Text(), nil
		}
		return nil, fmt.Errorf("is a boolean, not a %s", c.typ)
	default: // object, array
		return nil, fmt.Errorf("is a JSON %s, not a %s (read it as jsonb)", k, c.typ)
	}
}

// The days since 1970 of 0001-01-01 and 9999-12-31: the dates a sink
// writes (PostgreSQL's own range is wider, but no RFC 3339 date is).
const (
	minDay = -719162
	maxDay = 2932896
)

var numericSyntax = regexp.MustCompile(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

// convertString reads s as a value of typ.
func convertString(typ, s string) (any, error) {
	switch typ {
	case "text":
		return s, nil
	case "bigint":
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s is not an integer that fits 64 bits", event.Excerpt(s))
		}
		return n, nil
	case "numeric":
		if !numericSyntax.MatchString(s) {
			return nil, fmt.Errorf("%s is not a number", event.Excerpt(s))
		}
		return s, nil
	case "boolean":
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("%s is not true or false", event.Excerpt(s))
		}
		return b, nil
	case "timestamptz":
		t, err := event.ParseTime(s)
		if err != nil {
			// A full date alone (an Avro date, a Protobuf-JSON date string)
			// is that day's midnight in UTC: what a date column keeps.
			if d, derr := time.Parse(time.DateOnly, s); derr == nil {
				return d, nil
			}
			return nil, fmt.Errorf("%s is not an RFC 3339 time or date: %v", event.Excerpt(s), err)
		}
		return t, nil
	case "date":
		d, err := time.Parse(time.DateOnly, s)
		if err != nil {
			return nil, fmt.Errorf("%s is not a date (YYYY-MM-DD)", event.Excerpt(s))
		}
		return d, nil
	case "jsonb":
		if _, err := event.ParseDocument([]byte(s)); err != nil {
			return nil, fmt.Errorf("%s is not JSON", event.Excerpt(s))
		}
		return s, nil
	}
	return nil, fmt.Errorf("has the unknown type %s", typ)
}

// limit checks v against the live column's limits (fit set them): a value
// the database would refuse is the event's fault, caught here with the
// column's name rather than as a failed statement.
func (c *column) limit(v any) (any, error) {
	switch v := v.(type) {
	case string:
		if c.maxLen > 0 && utf8.RuneCountInString(v) > c.maxLen {
			return nil, fmt.Errorf("is %d characters long; the column takes at most %d", utf8.RuneCountInString(v), c.maxLen)
		}
		if strings.IndexByte(v, 0) >= 0 && c.typ == "text" {
			return nil, errors.New("contains a NUL character, which PostgreSQL text cannot hold")
		}
		if c.uuid && !uuidSyntax.MatchString(v) {
			return nil, fmt.Errorf("%s is not a UUID", event.Excerpt(v))
		}
		if c.precision > 0 && c.typ == "numeric" && !fitsNumeric(v, c.precision, c.scale) {
			return nil, fmt.Errorf("%s is too large for the column's numeric(%d,%d)", event.Excerpt(v), c.precision, c.scale)
		}
		if c.float && c.typ == "numeric" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("%s does not fit a floating-point column", event.Excerpt(v))
			}
			return f, nil
		}
	case int64:
		if c.integer && (v < c.min || v > c.max) {
			return nil, fmt.Errorf("%d is out of the column's range [%d, %d]", v, c.min, c.max)
		}
		if c.precision > 0 && !fitsNumeric(strconv.FormatInt(v, 10), c.precision, c.scale) {
			return nil, fmt.Errorf("%d is too large for the column's numeric(%d,%d)", v, c.precision, c.scale)
		}
	}
	return v, nil
}

var uuidSyntax = regexp.MustCompile(`^\{?[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}\}?$`)

// compatible are the column types each sink type can write.
var compatible = map[string][]string{
	"text":        {"text", "character varying", "character", "citext", "uuid"},
	"bigint":      {"bigint", "integer", "smallint", "numeric"},
	"numeric":     {"numeric", "double precision", "real"},
	"boolean":     {"boolean"},
	"timestamptz": {"timestamp with time zone", "timestamp without time zone", "date"},
	"date":        {"date"},
	"jsonb":       {"jsonb", "json"},
}

var (
	typmod        = regexp.MustCompile(`\((\d+)\)`)
	numericTypmod = regexp.MustCompile(`\((\d+)(?:,(-?\d+))?\)`)
)

// fitsNumeric reports whether lit (numericSyntax) fits numeric(precision,
// scale): rounded to scale fractional digits, half away from zero as
// PostgreSQL rounds, its absolute value is below 10^(precision-scale).
// It reads the digits and never builds the number, so a huge exponent or
// a megabyte of digits costs one pass.
func fitsNumeric(lit string, precision, scale int) bool {
	lit = strings.TrimLeft(lit, "+-")
	exp := 0
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		e, err := strconv.ParseInt(lit[i+1:], 10, 32)
		switch {
		case err == nil:
			exp = int(e)
		case strings.HasPrefix(lit[i+1:], "-"):
			exp = math.MinInt32
		default:
			exp = math.MaxInt32
		}
		lit = lit[:i]
	}
	// lit = 0.digits × 10^intDigits, digits without leading zeros.
	intDigits := len(lit)
	if i := strings.IndexByte(lit, '.'); i >= 0 {
		intDigits = i
		lit = lit[:i] + lit[i+1:]
	}
	digits := strings.TrimLeft(lit, "0")
	if digits == "" {
		return true // zero
	}
	intDigits -= len(lit) - len(digits)
	if exp > math.MinInt32/2 && exp < math.MaxInt32/2 {
		intDigits += exp
	} else if exp < 0 {
		return true // rounds to zero
	} else {
		return false
	}
	n := precision - scale // the value must stay below 10^n
	switch {
	case intDigits > n:
		return false
	case intDigits < n:
		return true
	}
	// As many integer digits as allowed: it overflows only when rounding
	// carries into a new digit (9.995 in numeric(3,2)).
	if precision >= len(digits) {
		return true
	}
	return strings.Trim(digits[:precision], "9") != "" || digits[precision] < '5'
}

// fit checks that the live column takes the sink's values and records its
// limits; the error completes "column x of table t is <type>, which …".
func (c *column) fit(col handling.Column) error {
	ok := false
	for _, b := range compatible[c.typ] {
		ok = ok || b == col.Base
	}
	if !ok {
		return fmt.Errorf("cannot take values read as %s: set the column's type in sinks[].columns[].type to one that fits (%s), or change the column", c.typ, suggest(col.Base))
	}
	if col.Generated {
		return errors.New("is an identity or generated column: leave it out of the sink's columns")
	}
	if c.optional && col.NotNull {
		return errors.New("is NOT NULL, but the sink's column is optional (a missing value writes NULL): make the column nullable in a migration, or remove optional")
	}
	switch col.Base {
	case "character varying", "character":
		if m := typmod.FindStringSubmatch(col.Type); m != nil {
			c.maxLen, _ = strconv.Atoi(m[1])
		}
	case "numeric":
		if m := numericTypmod.FindStringSubmatch(col.Type); m != nil {
			c.precision, _ = strconv.Atoi(m[1])
			c.scale, _ = strconv.Atoi(m[2]) // "": scale 0
		}
	case "integer":
		c.integer, c.min, c.max = true, math.MinInt32, math.MaxInt32
	case "smallint":
		c.integer, c.min, c.max = true, math.MinInt16, math.MaxInt16
	case "double precision", "real":
		c.float = true
	case "uuid":
		c.uuid = true
	case "date":
		c.date = true
	}
	return nil
}

// suggest names the sink types that fit a column type.
func suggest(base string) string {
	var out []string
	for _, t := range config.SinkTypes {
		for _, b := range compatible[t] {
			if b == base {
				out = append(out, t)
			}
		}
	}
	if len(out) == 0 {
		return "none does: use a text, integer, numeric, boolean, timestamp or json column, or write a Go handler"
	}
	return strings.Join(out, " or ")
}
