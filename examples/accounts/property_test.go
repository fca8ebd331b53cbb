package accounts_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"pgregory.net/rapid"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/pipeline"
)

// The property test of issue 25: hostile and unlucky producers, generated.
// Each case is a short stream for one account, on one partition, in one to
// three batches: valid account and ledger events, valid events with
// harmless oddities (extra fields, offsets in their time, NUL escapes and
// non-ASCII text in extra strings, moderate sizes and nesting), events with
// a fatal mutation (a time outside RFC 3339, an amount or currency that can
// never apply, invalid UTF-8, nesting or size past the limits, missing
// attributes, data of the wrong shape, a subject that is not the key),
// re-sent records, and the account opened before, between or after them —
// or never. It runs on the real database through the real decoder, gate,
// parking, release, handlers and dead letters, then redrives every dead
// letter, and checks after each case, with an oracle that shares no code
// with the worker (it knows which records it broke):
//
//   - the partition moved: no batch fails, and the stored position is the
//     batch's end after each one;
//   - every record has exactly one disposition: a broken one is
//     dead-lettered at its origin and has no effect; a valid ledger event
//     has exactly one ledger row when its account exists and is parked
//     otherwise; a re-sent one changes nothing;
//   - nothing is parked that can never apply: the parked events are exactly
//     the valid ledger events of an account that was never opened;
//   - a redrive of a dead letter whose event is still bad leaves it dead and
//     changes no effect.
//
// make test runs 100 cases; go test -run TestProperty -rapid.checks=2000
// runs more, -rapid.seed=N replays one.
func TestPropertyEveryRecordHasOneDispositionAndNothingStalls(t *testing.T) {
	t.Parallel()
	b := setupWith(t, pipeline.Options{MaxParkedPerResource: 1000})
	b.applier = pipeline.NewApplier(b.db.Pool, pipeline.Options{
		Decoders: map[string]*event.Decoder{topic: mustDecoder(t, 64<<10)}, Handlers: registry(),
		Logger: zap.NewNop(), MaxParkedPerResource: 1000,
	})
	var n atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		c := genCase(rt, int(n.Add(1)))
		checkCase(rt, b, c)
	})
}

func mustDecoder(t *testing.T, maxBytes int) *event.Decoder {
	t.Helper()
	dec, err := event.NewDecoder(event.DecoderConfig{Topic: topic, MaxPayloadBytes: maxBytes})
	require.NoError(t, err)
	return dec
}

// genRecord is one generated record and what the oracle knows of it.
type genRecord struct {
	rec *kgo.Record
	// id is the event's id ("" when broken before it has one).
	id string
	// kind: open, ledger (a valid one), broken, resend.
	kind string
	// cents is a valid ledger event's signed amount.
	cents int64
	// why names the mutation, for the failure message.
	why string
}

type propCase struct {
	account   string
	partition int32
	records   []genRecord
	cuts      []int // batch boundaries
	opened    bool
}

func genCase(rt *rapid.T, n int) propCase {
	c := propCase{account: fmt.Sprintf("prop-%d", n), partition: int32(n % 4)}
	count := rapid.IntRange(1, 10).Draw(rt, "records")
	openAt := rapid.IntRange(-1, count).Draw(rt, "open_at") // -1: never
	for i := 0; i < count; i++ {
		if i == openAt {
			c.records = append(c.records, genRecord{rec: cetest.Account(topic, fmt.Sprintf("%s-open", c.account), "account.opened", c.account, 1, "ann"), id: c.account + "-open", kind: "open"})
			c.opened = true
		}
		id := fmt.Sprintf("%s-%d", c.account, i)
		switch rapid.IntRange(0, 9).Draw(rt, "what") {
		case 0, 1, 2, 3:
			c.records = append(c.records, genValidLedger(rt, c.account, id))
		case 4:
			if len(c.records) > 0 {
				prev := c.records[rapid.IntRange(0, len(c.records)-1).Draw(rt, "resend")]
				kind := "resend"
				if prev.kind == "broken" || prev.kind == "resend-broken" {
					kind = "resend-broken" // a duplicate of its dead claim, or undecodable again
				}
				c.records = append(c.records, genRecord{rec: &kgo.Record{Topic: topic, Key: prev.rec.Key, Value: prev.rec.Value, Headers: prev.rec.Headers}, id: prev.id, kind: kind, why: "re-sent " + prev.why})
				continue
			}
			c.records = append(c.records, genValidLedger(rt, c.account, id))
		default:
			c.records = append(c.records, genBroken(rt, c.account, id))
		}
	}
	if openAt == count {
		c.records = append(c.records, genRecord{rec: cetest.Account(topic, c.account+"-open", "account.opened", c.account, 1, "ann"), id: c.account + "-open", kind: "open"})
		c.opened = true
	}
	for i := 1; i < len(c.records); i++ {
		if rapid.IntRange(0, 3).Draw(rt, "cut") == 0 {
			c.cuts = append(c.cuts, i)
		}
	}
	return c
}

var currencies = []string{"EUR", "USD", "JPY", "GBP"}

// oddText is text that is valid in an extra field: non-ASCII, a NUL
// escape, quotes and backslashes, control characters escaped.
var oddText = rapid.SampledFrom([]string{"plain", "é€😀", `a\u0000b`, `quote \" and back\\slash`, `\u001b[2J`, `\ud83d\ude00`, ""})

// genValidLedger is a ledger event that applies once its account exists,
// perhaps with harmless oddities.
func genValidLedger(rt *rapid.T, account, id string) genRecord {
	cents := rapid.Int64Range(1, 1<<40).Draw(rt, "cents")
	typ := rapid.SampledFrom([]string{"ledger.credited", "ledger.debited"}).Draw(rt, "type")
	data := fmt.Sprintf(`"amount_cents":%d,"currency":%q`, cents, rapid.SampledFrom(currencies).Draw(rt, "currency"))
	attrs := ""
	why := "valid"
	switch rapid.IntRange(0, 5).Draw(rt, "oddity") {
	case 1:
		data += `,"memo":"` + oddText.Draw(rt, "memo") + `"`
		why = "extra field"
	case 2:
		off := fmt.Sprintf("%+03d:%02d", rapid.IntRange(-23, 23).Draw(rt, "h"), rapid.IntRange(0, 59).Draw(rt, "m"))
		attrs = `,"time":"2024-02-29T12:34:56.789` + off + `"`
		why = "time with offset " + off
	case 3:
		data += `,"blob":"` + strings.Repeat("x", rapid.IntRange(0, 30_000).Draw(rt, "size")) + `"`
		why = "sizeable"
	case 4:
		d := rapid.IntRange(1, 100).Draw(rt, "depth")
		data += `,"nest":` + strings.Repeat("[", d) + "1" + strings.Repeat("]", d)
		why = fmt.Sprintf("nested %d", d)
	case 5:
		attrs = `,"myextension":"x"`
		why = "extension attribute"
	}
	v := fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":%q,"type":%q,"subject":%q%s,"data":{%s}}`, id, cetest.Source, typ, account, attrs, data)
	if typ == "ledger.debited" {
		cents = -cents
	}
	return genRecord{rec: &kgo.Record{Topic: topic, Key: []byte(account), Value: []byte(v)}, id: id, kind: "ledger", cents: cents, why: why}
}

// genBroken is a record that can never apply.
func genBroken(rt *rapid.T, account, id string) genRecord {
	ce := func(typ, subject, attrs, data string) string {
		return fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":%q,"type":%q,"subject":%q%s,"data":%s}`, id, cetest.Source, typ, subject, attrs, data)
	}
	ledger := func(data string) string { return ce("ledger.credited", account, "", data) }
	mutations := []struct {
		why   string
		value func() string
	}{
		{"time +24:00", func() string {
			return ce("ledger.credited", account, `,"time":"2024-01-01T00:00:00+24:00"`, `{"amount_cents":5,"currency":"EUR"}`)
		}},
		{"time +23:60", func() string {
			return ce("ledger.credited", account, `,"time":"2024-01-01T00:00:00+23:60"`, `{"amount_cents":5,"currency":"EUR"}`)
		}},
		{"time month 13", func() string {
			return ce("ledger.credited", account, `,"time":"2024-13-01T00:00:00Z"`, `{"amount_cents":5,"currency":"EUR"}`)
		}},
		{"time a number", func() string {
			return ce("ledger.credited", account, `,"time":1700000000`, `{"amount_cents":5,"currency":"EUR"}`)
		}},
		{"time with a NUL", func() string {
			return ce("ledger.credited", account, `,"time":"2024-01-01T00:00:00Z\u0000"`, `{"amount_cents":5,"currency":"EUR"}`)
		}},
		{"amount negative", func() string {
			return ledger(fmt.Sprintf(`{"amount_cents":%d,"currency":"EUR"}`, -rapid.Int64Range(1, 1<<40).Draw(rt, "neg")))
		}},
		{"amount zero", func() string { return ledger(`{"amount_cents":0,"currency":"EUR"}`) }},
		{"amount fractional", func() string { return ledger(`{"amount_cents":1.5,"currency":"EUR"}`) }},
		{"amount exponent", func() string { return ledger(`{"amount_cents":1e3,"currency":"EUR"}`) }},
		{"amount a string", func() string { return ledger(`{"amount_cents":"5","currency":"EUR"}`) }},
		{"amount an array", func() string { return ledger(`{"amount_cents":[5],"currency":"EUR"}`) }},
		{"amount an object", func() string { return ledger(`{"amount_cents":{"v":5},"currency":"EUR"}`) }},
		{"amount null", func() string { return ledger(`{"amount_cents":null,"currency":"EUR"}`) }},
		{"amount missing", func() string { return ledger(`{"currency":"EUR"}`) }},
		{"amount past int64", func() string { return ledger(`{"amount_cents":9223372036854775808,"currency":"EUR"}`) }},
		{"currency lower case", func() string { return ledger(`{"amount_cents":5,"currency":"eur"}`) }},
		{"currency four letters", func() string { return ledger(`{"amount_cents":5,"currency":"EURO"}`) }},
		{"currency with a NUL", func() string { return ledger(`{"amount_cents":5,"currency":"E\u0000R"}`) }},
		{"currency unknown", func() string { return ledger(`{"amount_cents":5,"currency":"ZZQ"}`) }},
		{"currency a number", func() string { return ledger(`{"amount_cents":5,"currency":978}`) }},
		{"currency missing", func() string { return ledger(`{"amount_cents":5}`) }},
		{"data an array", func() string { return ledger(`[5,"EUR"]`) }},
		{"data a string", func() string { return ledger(`"5 EUR"`) }},
		{"data null", func() string { return ledger(`null`) }},
		{"invalid UTF-8 in data", func() string { return ledger("{\"amount_cents\":5,\"currency\":\"EUR\",\"memo\":\"\xff\xfe\"}") }},
		{"invalid UTF-8 in the subject", func() string {
			return ce("ledger.credited", account+"\xff", "", `{"amount_cents":5,"currency":"EUR"}`)
		}},
		{"nesting past the limit", func() string {
			d := rapid.IntRange(event.MaxNesting+1, 3*event.MaxNesting).Draw(rt, "deep")
			return ledger(`{"amount_cents":5,"currency":"EUR","nest":` + strings.Repeat("[", d) + strings.Repeat("]", d) + `}`)
		}},
		{"larger than the limit", func() string {
			return ledger(`{"amount_cents":5,"currency":"EUR","blob":"` + strings.Repeat("y", 70_000) + `"}`)
		}},
		{"missing id", func() string {
			return fmt.Sprintf(`{"specversion":"1.0","source":%q,"type":"ledger.credited","subject":%q,"data":{"amount_cents":5,"currency":"EUR"}}`, cetest.Source, account)
		}},
		{"missing type", func() string {
			return fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":%q,"subject":%q,"data":{"amount_cents":5,"currency":"EUR"}}`, id, cetest.Source, account)
		}},
		{"unknown type", func() string { return ce("ledger.refunded", account, "", `{"amount_cents":5,"currency":"EUR"}`) }},
		{"subject not the key", func() string {
			return ce("ledger.credited", account+"-other", "", `{"amount_cents":5,"currency":"EUR"}`)
		}},
		{"account event without a version", func() string {
			return ce("account.updated", account, "", `{"name":"n","email":"n@example.com","plan":"pro"}`)
		}},
		{"account event with a NUL in the name", func() string {
			return ce("account.updated", account, `,"resourceversion":7`, `{"name":"a\u0000b","email":"n@example.com","plan":"pro"}`)
		}},
		{"not JSON", func() string { return `{"specversion":"1.0","id":` }},
		{"empty", func() string { return "" }},
	}
	m := rapid.SampledFrom(mutations).Draw(rt, "mutation")
	return genRecord{rec: &kgo.Record{Topic: topic, Key: []byte(account), Value: []byte(m.value())}, id: id, kind: "broken", why: m.why}
}

func checkCase(rt *rapid.T, b *bundle, c propCase) {
	ctx := context.Background()
	p := c.partition
	first := b.offsets[p]
	recs := make([]*kgo.Record, len(c.records))
	for i, r := range c.records {
		r.rec.Partition, r.rec.Offset = p, first+int64(i)
		recs[i] = r.rec
	}
	b.offsets[p] = first + int64(len(recs))
	cuts := append(append([]int{0}, c.cuts...), len(recs))
	for i := 1; i < len(cuts); i++ {
		batch := recs[cuts[i-1]:cuts[i]]
		if _, err := b.applier.ApplyBatch(ctx, consumer.Batch{Group: "g", Topic: topic, Partition: p, Records: batch}); err != nil {
			rt.Fatalf("batch at %d of %s failed (the partition would stall): %v", batch[0].Offset, c.account, err)
		}
		next := count(rt, b, `SELECT next_offset FROM consumer_offsets WHERE consumer_group = 'g' AND topic = $1 AND "partition" = $2`, topic, p)
		if want := batch[len(batch)-1].Offset + 1; next != want {
			rt.Fatalf("stored position %d after a batch ending at %d", next, want)
		}
	}

	var wantParked []string
	var wantBalance int64
	for _, r := range c.records {
		o := r.rec.Offset
		dead := count(rt, b, `SELECT count(*) FROM dead_letters WHERE topic = $1 AND "partition" = $2 AND "offset" = $3`, topic, p, o)
		switch r.kind {
		case "resend-broken":
			if n := count(rt, b, `SELECT count(*) FROM ledger_entries WHERE event_key = $1`, cetest.Key(r.id)); n != 0 {
				rt.Fatalf("%s (offset %d) has an effect", r.why, o)
			}
		case "broken":
			if dead != 1 {
				rt.Fatalf("%s (offset %d) was not dead-lettered", r.why, o)
			}
			if n := count(rt, b, `SELECT count(*) FROM ledger_entries WHERE event_key = $1`, cetest.Key(r.id)); n != 0 {
				rt.Fatalf("%s (offset %d) has an effect", r.why, o)
			}
		case "ledger":
			if dead != 0 {
				rt.Fatalf("valid ledger event (%s, offset %d) was dead-lettered: %s", r.why, o, deadReason(rt, b, p, o))
			}
			if c.opened {
				if n := count(rt, b, `SELECT count(*) FROM ledger_entries WHERE event_key = $1 AND amount_cents = $2`, cetest.Key(r.id), r.cents); n != 1 {
					rt.Fatalf("valid ledger event (%s, offset %d) has %d ledger rows", r.why, o, n)
				}
				wantBalance += r.cents
			} else {
				wantParked = append(wantParked, cetest.Key(r.id))
			}
		case "resend", "open":
			if dead != 0 {
				rt.Fatalf("%s (offset %d) was dead-lettered: %s", r.kind, o, deadReason(rt, b, p, o))
			}
		}
	}
	if n := count(rt, b, `SELECT count(*) FROM ledger_entries WHERE account_id = $1`, c.account); c.opened && n != int64(len(uniqueLedgers(c))) {
		rt.Fatalf("%d ledger rows for %d distinct valid ledger events", n, len(uniqueLedgers(c)))
	}
	if c.opened {
		if got := count(rt, b, `SELECT coalesce(sum(amount_cents), 0) FROM ledger_entries WHERE account_id = $1`, c.account); got != wantBalance {
			rt.Fatalf("balance %d, want %d", got, wantBalance)
		}
	}
	parked := keys(rt, b, `SELECT event_key FROM parked_events WHERE resource = $1 AND state = 'parked' ORDER BY "offset"`, c.account)
	if want := dedup(wantParked); !equal(parked, want) {
		rt.Fatalf("parked %v, want exactly the valid ledger events of an account never opened %v", parked, want)
	}

	// Redrive every dead letter of the case: still bad, still dead, and
	// nothing changes.
	before := count(rt, b, `SELECT count(*) FROM ledger_entries`)
	ids := ints(rt, b, `SELECT id FROM dead_letters WHERE topic = $1 AND "partition" = $2 AND "offset" >= $3 AND "offset" < $4`, topic, p, first, b.offsets[p])
	for _, id := range ids {
		res, err := b.applier.Redrive(ctx, id)
		if errors.Is(err, deadletter.ErrTruncated) {
			continue // kept as a prefix: a redrive needs the whole record (dlq redrive says so)
		}
		if err != nil {
			rt.Fatalf("redriving dead letter %d: %v", id, err)
		}
		if res.Resolution != "" {
			rt.Fatalf("dead letter %d resolved as %s by a redrive of a bad event", id, res.Resolution)
		}
	}
	if after := count(rt, b, `SELECT count(*) FROM ledger_entries`); after != before {
		rt.Fatalf("a redrive of bad events wrote %d ledger rows", after-before)
	}
}

// uniqueLedgers are the distinct valid ledger events' ids of c.
func uniqueLedgers(c propCase) map[string]bool {
	out := map[string]bool{}
	for _, r := range c.records {
		if r.kind == "ledger" {
			out[r.id] = true
		}
	}
	return out
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func count(rt *rapid.T, b *bundle, q string, args ...any) int64 {
	var n int64
	if err := b.db.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		rt.Fatalf("%s: %v", q, err)
	}
	return n
}

func keys(rt *rapid.T, b *bundle, q string, args ...any) []string {
	rows, err := b.db.Pool.Query(context.Background(), q, args...)
	if err != nil {
		rt.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rt.Fatalf("%s: %v", q, err)
		}
		out = append(out, k)
	}
	return out
}

func ints(rt *rapid.T, b *bundle, q string, args ...any) []int64 {
	rows, err := b.db.Pool.Query(context.Background(), q, args...)
	if err != nil {
		rt.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var k int64
		if err := rows.Scan(&k); err != nil {
			rt.Fatalf("%s: %v", q, err)
		}
		out = append(out, k)
	}
	return out
}

func deadReason(rt *rapid.T, b *bundle, p int32, o int64) string {
	var reason, msg string
	_ = b.db.Pool.QueryRow(context.Background(), `SELECT reason, error FROM dead_letters WHERE topic = $1 AND "partition" = $2 AND "offset" = $3`, topic, p, o).Scan(&reason, &msg)
	return reason + ": " + msg
}
