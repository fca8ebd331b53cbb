package event

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// FormatDebezium: Debezium change events, one per row change, in JSON with
// or without the converter's schema envelope ({"schema": …, "payload": …}).
//
// An event is mapped once, the same for every table:
//
//   - Subject: the row's key, from the record key (Debezium keys each
//     record by the row's primary key): the value of a one-column key
//     ({"id": 42} → "42"), the canonical JSON of a wider one.
//   - Version and Sequence: the change's place in the source's commit
//     order. A streamed change (c, u, d) has Version StreamedVersion +
//     the LSN of the last commit before it (the first of source.sequence)
//     and Sequence its own LSN (source.lsn): a change of a transaction
//     that committed later is newer, and within a transaction the later
//     change is. By LSN alone it would not be: an INSERT writes its row
//     before it waits on a key another transaction holds, and if that
//     one deletes the row and commits first, the insert's LSN is below
//     the delete's. A snapshot read (r) has Version its LSN and Sequence
//     0, so every streamed change outranks every read. A read carries the
//     snapshot's LSN, and that is not below every change streamed after
//     it: a transaction that began while the slot was being created and
//     commits after its consistent point is not in the snapshot, is
//     streamed, and its changes can carry LSNs below the snapshot's
//     (PostgreSQL's snapbuild.c). By LSN alone such a change would be
//     stale against the read. Versions with a Sequence need a numeric
//     version column.
//   - Type: "<schema>.<table>.<create|update|delete|read>" from source and
//     op (read: a snapshot row).
//   - Source: "<connector name>.<schema>.<table>"; ID:
//     "<position>:<subject>", the position being the LSN for a read and
//     StreamedVersion + the LSN for a streamed change (a read and a
//     streamed change at one LSN are two events).
//   - Key (StrategyPosition): the source, the position and the row: a
//     change re-sent after the connector restarts from its last committed
//     offset is a duplicate.
//   - Data: {"op", "before", "after", "source"} — the
//     change without what differs between the first sending and a
//     re-sending of the same change and would make it a conflict:
//     Debezium's processing times (ts_ms, ts_us, ts_ns) and all of source
//     but db, schema, table, lsn and txId (lsn and txId as numbers).
//     Sinks and handlers read /after/<column> and /before/<column>.
//
// Tombstones (the null value after a delete, for log compaction) and
// events that change no row (op "t" truncate, "m" message) are skipped:
// Decode returns a *SkipError.
const FormatDebezium = "debezium"

// StrategyPosition keys a change event by its source, its position in the
// source's log and its row.
const StrategyPosition = "position"

// StreamedVersion is added to the commit a streamed change (op c, u or d)
// follows to make its version: 10^18, so the version reads as a 1
// followed by that LSN in 18 digits (the first of source.sequence; the
// change's own LSN when that is null), its Sequence is its own LSN, and
// every streamed change outranks every snapshot read, whose version is
// its LSN. An LSN of 10^18 or more (an exabyte of write-ahead log) is
// refused as invalid_version. Gate a change by the event's own Version
// (Effects.Upsert(t, ev.Version, …)), which carries its Sequence, never
// by a version computed from the LSN.
const StreamedVersion int64 = 1_000_000_000_000_000_000

// SkipError reports a record that is not an event and needs no effect: a
// Debezium tombstone. It is neither dead-lettered nor retried; the record
// is acknowledged as skipped.
type SkipError struct {
	Why string
}

func (e *SkipError) Error() string { return "skipped: " + e.Why }

// IsSkip reports whether err is, or wraps, a *SkipError.
func IsSkip(err error) bool {
	var se *SkipError
	return errors.As(err, &se)
}

// debeziumVerbs are the row operations and their type suffixes.
var debeziumVerbs = map[string]string{"c": "create", "u": "update", "d": "delete", "r": "read"}

func (d *Decoder) decodeDebezium(ctx context.Context, r Record) (Event, error) {
	if len(r.Value) == 0 {
		return Event{}, &SkipError{Why: "a tombstone (the delete before it carries the change)"}
	}
	var wire *Wire
	if isWireFormat(r.Value) {
		js, w, err := d.wirePart(ctx, "record value", r.Value)
		if err != nil {
			return Event{}, err
		}
		r.Value, wire = js, w
	}
	if isWireFormat(r.Key) {
		js, _, err := d.wirePart(ctx, "record key", r.Key)
		if err != nil {
			return Event{}, err
		}
		r.Key = js
	}
	if !utf8.Valid(r.Value) {
		return Event{}, decodeErr(ReasonInvalidUTF8, "the record value is not valid UTF-8 at byte %d", invalidUTF8Offset(r.Value))
	}
	// The envelope is two levels more than the row (payload, after).
	pd, err := parseDocument(r.Value, MaxNesting+2)
	if err != nil {
		return Event{}, notJSON("the value", err)
	}
	doc := &pd.d
	if len(doc.issues) > 0 {
		return Event{}, decodeErr(ReasonInvalidData, "the change event is not I-JSON: %s", doc.issues[0].msg)
	}
	p, err := debeziumPayload(doc, doc.root)
	switch {
	case err != nil:
		return Event{}, err
	case p < 0:
		return Event{}, &SkipError{Why: "a tombstone (a null payload)"}
	}
	member := func(obj int, name string) int {
		if v, ok := doc.member(obj, name); ok {
			return v
		}
		return -1
	}
	op := member(p, "op")
	if op < 0 || doc.kind(op) != KindString {
		return Event{}, decodeErr(ReasonNotDebezium, "the change event has no op")
	}
	verb, ok := debeziumVerbs[doc.str(op)]
	switch {
	case !ok && (doc.str(op) == "t" || doc.str(op) == "m"):
		return Event{}, &SkipError{Why: "op " + doc.str(op) + " changes no row"}
	case !ok:
		return Event{}, decodeErr(ReasonNotDebezium, "op %s: want c, u, d or r", Excerpt(doc.str(op)))
	}
	src := member(p, "source")
	if src < 0 || doc.kind(src) != KindObject {
		return Event{}, decodeErr(ReasonNotDebezium, "the change event has no source")
	}
	text := func(name string) string {
		v := member(src, name)
		if v < 0 || doc.kind(v) != KindString {
			return ""
		}
		return doc.str(v)
	}
	table, schema, name := text("table"), text("schema"), text("name")
	if table == "" {
		return Event{}, decodeErr(ReasonNotDebezium, "the change event's source names no table")
	}
	var ev Event
	lsn, err := debeziumPosition(doc, src)
	if err != nil {
		return Event{}, err
	}
	ev.Version = lsn
	var commit int64 // the order of a streamed change: see below
	if verb != "read" {
		ev.Version += StreamedVersion
		if commit, err = debeziumLastCommit(doc, src); err != nil {
			return Event{}, err
		}
	}
	scope := table
	if schema != "" {
		scope = schema + "." + table
	}
	ev.Type = scope + "." + verb
	ev.Source = scope
	if name != "" {
		ev.Source = name + "." + scope
	}
	if ev.Subject, err = debeziumSubject(r.Key); err != nil {
		return Event{}, err
	}
	if err := checkResourceIDLength("the row key", ev.Subject); err != nil {
		return Event{}, err
	}
	for _, f := range [...]struct{ name, value string }{{"source", ev.Source}, {"type", ev.Type}} {
		if err := checkChars(f.name, f.value); err != nil {
			return Event{}, err
		}
	}
	// The row key is the source table's: any text PostgreSQL holds (a tab,
	// a newline, a noncharacter), not a CloudEvents attribute. Only NUL,
	// which no text column holds, is refused.
	if i := strings.IndexByte(ev.Subject, 0); i >= 0 {
		return Event{}, decodeErr(ReasonInvalidAttribute, "row key %s contains U+0000 at byte %d, which no PostgreSQL text holds", Excerpt(ev.Subject), i)
	}
	ev.ID = strconv.FormatInt(ev.Version, 10) + ":" + ev.Subject
	if len(ev.ID) > MaxAttributeBytes {
		sum := sha256.Sum256([]byte(ev.ID))
		ev.ID = "sha256:" + hex.EncodeToString(sum[:])
	}
	if err := checkAttributeLengths(ev.ID, ev.Source, ev.Type); err != nil {
		return Event{}, err
	}

	// The change itself: what a re-sending repeats exactly. Debezium's
	// processing times and the rest of its source block (its version, the
	// snapshot marker, the sequence, times in other units) may differ
	// between a first sending and a re-sending — across an upgrade of the
	// connector, say — and would make the same change a conflict. So may
	// the transaction block: it is null until provide.transaction.metadata
	// is turned on, and its counters restart with the connector; it is
	// left out (source.txId names the transaction).
	data := make([]byte, 0, len(r.Value))
	data = append(data, '{')
	for i, m := range [...]string{"op", "before", "after", "source"} {
		if i > 0 {
			data = append(data, ',')
		}
		data = append(data, '"')
		data = append(data, m...)
		data = append(data, '"', ':')
		v := member(p, m)
		switch {
		case m == "source":
			data = appendDebeziumSource(data, doc, src, lsn)
		case v >= 0:
			data = append(data, doc.raw(v)...)
		default:
			data = append(data, "null"...)
		}
	}
	data = append(data, '}')
	dd, err := parseDocument(data, MaxNesting+1)
	if err != nil {
		return Event{}, notJSON("the change", err)
	}
	ev.Data = data
	if ev, err = d.finish(ev, &dd.d, dd.d.root); err != nil {
		return Event{}, err
	}
	// The id, the dedupe key and the payload hash are the position's
	// alone (above); the order among the row's versions is the commit
	// order: the last commit before the change, then the change's LSN.
	if commit >= 0 && verb != "read" {
		ev.Version, ev.Sequence = StreamedVersion+commit, lsn
	}
	ev.TraceParent, ev.TraceState = traceContext(nil, r.Headers)
	ev.doc = dd.keep(ev.Data, 0, dd.d.root)
	ev.Wire = wire
	return ev, nil
}

// appendDebeziumSource appends the stable part of a change's source block:
// where the change was made (db, schema, table) and its position (lsn, as
// a number whatever the converter wrote; txId likewise).
func appendDebeziumSource(b []byte, doc *jsonDoc, src int, lsn int64) []byte {
	b = append(b, '{')
	for _, name := range [...]string{"db", "schema", "table"} {
		if v, ok := doc.member(src, name); ok && doc.kind(v) == KindString {
			b = append(b, '"')
			b = append(b, name...)
			b = append(b, '"', ':')
			b = append(b, doc.raw(v)...)
			b = append(b, ',')
		}
	}
	b = append(b, `"lsn":`...)
	b = strconv.AppendInt(b, lsn, 10)
	if v, ok := doc.member(src, "txId"); ok {
		switch {
		case doc.isInteger(v):
			b = append(b, `,"txId":`...)
			b = append(b, doc.integer(v)...)
		case doc.kind(v) == KindString:
			// A transaction ID written as text: kept as the number it
			// names ("007" is 7), dropped if it names none.
			if id, err := strconv.ParseUint(doc.str(v), 10, 64); err == nil {
				b = append(b, `,"txId":`...)
				b = strconv.AppendUint(b, id, 10)
			}
		}
	}
	return append(b, '}')
}

// isWireFormat reports whether b starts with the Confluent wire format's
// magic byte, which no JSON text does.
func isWireFormat(b []byte) bool { return len(b) > 0 && b[0] == 0 }

// wirePart decodes a record's value or key written by a registry
// serializer or converter (Avro, Protobuf or JSON Schema in the Confluent
// wire format) to the JSON the rest of the mapping reads. Only format
// debezium reads such records without a registry configured.
func (d *Decoder) wirePart(ctx context.Context, what string, b []byte) ([]byte, *Wire, error) {
	if d.registry == nil {
		return nil, nil, decodeErr(ReasonNotDebezium, "the %s is in the Confluent wire format (Avro, Protobuf or JSON Schema through a schema registry), and no registry is configured: set schema_registry.url", what)
	}
	js, w, err := d.registry.transcode(ctx, what, b, maxExpansion*len(b)+maxExpansionSlack)
	var de *DecodeError
	if errors.As(err, &de) && !strings.HasPrefix(de.Msg, "the "+what) {
		// Say which of the two it was (a copy: the registry keeps its
		// refusals).
		err = &DecodeError{Reason: de.Reason, Msg: "the " + what + ": " + de.Msg}
	}
	return js, w, err
}

// debeziumPayload returns the change event in v: v itself, or its payload
// under the JSON converter's schema envelope; -1 for a null payload.
func debeziumPayload(doc *jsonDoc, v int) (int, error) {
	if doc.kind(v) != KindObject {
		return 0, decodeErr(ReasonNotDebezium, "the value is %s, not a change event object", article(doc.kind(v)))
	}
	payload, hasSchema := -1, false
	doc.eachMember(v, func(n, val int) bool {
		switch string(doc.strBytes(n)) {
		case "payload":
			payload = val
		case "schema":
			hasSchema = true
		}
		return true
	})
	if !hasSchema || payload < 0 {
		return v, nil
	}
	switch doc.kind(payload) {
	case KindNull:
		return -1, nil
	case KindObject:
		return payload, nil
	}
	return 0, decodeErr(ReasonNotDebezium, "the payload is %s, not a change event object", article(doc.kind(payload)))
}

// debeziumLastCommit is the first of source.sequence, the LSN of the last
// transaction the connector saw commit before this change's ("[\"lsn\",
// \"lsn\"]"); -1 when the source has no sequence (a connector older than
// Debezium 1.4) or its first is null (the first transaction after the
// connector starts or snapshots), whose changes are then ordered by their
// LSN alone.
//
// It orders changes by commit: every change of a transaction that
// committed after another's carries a last commit at or above that
// other's commit, which is above all of the other's changes' (PostgreSQL
// streams whole transactions in commit order). A re-sending may carry
// another last commit (the connector restarted from an offset), but one
// that is still below the change's own commit, so no later transaction's
// change is outranked by it.
func debeziumLastCommit(doc *jsonDoc, src int) (int64, error) {
	v, ok := doc.member(src, "sequence")
	if !ok || doc.kind(v) == KindNull {
		return -1, nil
	}
	bad := func() (int64, error) {
		return 0, decodeErr(ReasonInvalidVersion, "source.sequence %s is not [last commit LSN, LSN]", Excerpt(doc.head(v)))
	}
	if doc.kind(v) != KindString {
		return bad()
	}
	seq, ok := strings.CutPrefix(doc.str(v), "[")
	if !ok {
		return bad()
	}
	first, _, ok := strings.Cut(seq, ",")
	if !ok {
		return bad()
	}
	first = strings.TrimSpace(first)
	if first == "null" {
		// The connector has seen no commit since it started or last
		// snapshotted: its first transaction. As 0 it would rank below
		// every change streamed before a new snapshot; by its LSN it
		// ranks as before the commit order.
		return -1, nil
	}
	digits, ok := strings.CutPrefix(first, `"`)
	if digits, ok = strings.CutSuffix(digits, `"`); !ok || !isDigits(digits) {
		return bad()
	}
	if digits == "0" {
		return 0, nil
	}
	commit, err := parseVersion(digits)
	if err != nil || commit >= StreamedVersion {
		return bad()
	}
	return commit, nil
}

// debeziumPosition is the change's position: source.lsn, an integer from 1
// to StreamedVersion - 1.
func debeziumPosition(doc *jsonDoc, src int) (int64, error) {
	v, ok := doc.member(src, "lsn")
	if !ok || doc.kind(v) == KindNull {
		return 0, decodeErr(ReasonInvalidVersion, "the change event's source has no lsn: only PostgreSQL change events (debezium-connector-postgres) are read")
	}
	var digits string
	switch {
	case doc.isInteger(v):
		digits = doc.integer(v)
	case doc.kind(v) == KindString && isDigits(doc.str(v)):
		digits = doc.str(v) // a 64-bit integer in Protobuf's JSON mapping
	default:
		return 0, decodeErr(ReasonInvalidVersion, "source.lsn %s is not an integer", Excerpt(doc.head(v)))
	}
	lsn, err := parseVersion(digits)
	if err == nil && lsn >= StreamedVersion {
		return 0, decodeErr(ReasonInvalidVersion, "source.lsn %d is beyond the positions read (below 10^18)", lsn)
	}
	return lsn, err
}

// debeziumSubject is the row's key from the record key: the value of a
// one-column key, the canonical JSON of a wider one.
func debeziumSubject(key []byte) (string, error) {
	if len(key) == 0 {
		return "", decodeErr(ReasonMissingSubject, "the record has no key: the table has no primary key; give it one, or set the connector's message.key.columns")
	}
	if !utf8.Valid(key) {
		return "", decodeErr(ReasonInvalidUTF8, "the record key is not valid UTF-8 at byte %d", invalidUTF8Offset(key))
	}
	pd, err := parseDocument(key, MaxNesting)
	if err != nil {
		return "", notJSON("the record key", err)
	}
	doc := &pd.d
	if len(doc.issues) > 0 {
		return "", decodeErr(ReasonInvalidData, "the record key is not I-JSON: %s", doc.issues[0].msg)
	}
	k, err := debeziumPayload(doc, doc.root)
	switch {
	case err != nil:
		return "", err
	case k < 0 || doc.kind(k) != KindObject:
		return "", decodeErr(ReasonMissingSubject, "the record key is not an object of the row's key columns")
	}
	n := 0
	doc.eachMember(k, func(_, _ int) bool {
		n++
		return true
	})
	if n == 0 {
		return "", decodeErr(ReasonMissingSubject, "the record key has no columns")
	}
	return keyText(doc, k), nil
}

// keyText is the text a structured record key (a registry format's, a
// Debezium row key) is compared and claimed by: a string or an integer
// as itself, an object of one such member as that member's value ({"id":
// 42} → "42"), anything else as its canonical JSON.
func keyText(doc *jsonDoc, k int) string {
	switch {
	case doc.kind(k) == KindString:
		return doc.str(k)
	case doc.isInteger(k):
		return doc.integer(k)
	case doc.kind(k) == KindObject:
		n, only := 0, -1
		doc.eachMember(k, func(_, val int) bool {
			n++
			only = val
			return true
		})
		if n == 1 && (doc.kind(only) == KindString || doc.isInteger(only)) {
			return keyText(doc, only)
		}
	}
	w := canonWriter{doc: doc}
	w.value(k)
	return string(w.b)
}

// Change is a change event's operation and row images, for a handler that
// acts on transitions (status packed → shipped): the row as it was and as
// it is, each a Value of the event's Data (KindNull where the operation
// has none: before of a create or a read, after of a delete).
type Change struct {
	// Op is "c" (create), "u" (update), "d" (delete) or "r" (read: a
	// snapshot row).
	Op string
	// Before and After are the row images; decode one into a struct with
	// json.Unmarshal(c.After.Raw(), &row).
	Before, After Value
	// Source is Debezium's source block: db, schema, table, lsn, txId.
	Source Value
	// LSN is source.lsn, the change's position in the source's log. It
	// is not the change's order: gate by the event's Version, which with
	// its Sequence is the commit order (see StreamedVersion).
	LSN int64
}

// Change returns the change event's operation and row images. It fails
// for an event that is no change event (another topic format).
func (ev Event) Change() (Change, error) {
	doc, err := ev.Document()
	if err != nil {
		return Change{}, err
	}
	op, ok := doc.Get("op")
	if !ok || op.Kind() != KindString {
		return Change{}, errors.New("the event is no change event (format debezium): its data has no op")
	}
	c := Change{Op: op.Text()}
	c.Before, _ = doc.Get("before")
	c.After, _ = doc.Get("after")
	c.Source, _ = doc.Get("source")
	if lsn, ok := c.Source.Get("lsn"); ok {
		c.LSN, _ = strconv.ParseInt(string(lsn.Raw()), 10, 64)
	}
	return c, nil
}
