package test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

// hostileRecord is one record a hostile (or broken) producer can send that
// used to cost a partition its progress or the worker its memory, and the
// reason it must be dead-lettered with.
type hostileRecord struct {
	name   string
	reason string
	record func(topic string) *kgo.Record
}

// randomText is n bytes of random printable text: it passes every
// character check and compresses to nothing.
func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)[:n]
}

func hostileCatalogue() []hostileRecord {
	long := strings.Repeat("x", 300) // over the 256-byte attribute limit
	subject := randomText(3000)      // a 3 kB resource ID: over PostgreSQL's btree limit of 2704 bytes
	var numbers strings.Builder
	numbers.WriteByte('[')
	for i := 0; numbers.Len() < 400_000; i++ {
		if i > 0 {
			numbers.WriteByte(',')
		}
		numbers.WriteString(strconv.Itoa(i % 10))
	}
	numbers.WriteByte(']')
	return []hostileRecord{
		{"id too long", "attribute_too_long", func(tp string) *kgo.Record {
			return envelope(tp, "h-id", ceJSON(long, "account.opened", "h-id", "1", goodAccount))
		}},
		{"source too long", "attribute_too_long", func(tp string) *kgo.Record {
			return envelope(tp, "h-src", fmt.Sprintf(`{"specversion":"1.0","id":"h1","source":%q,"type":"account.opened","subject":"h-src","resourceversion":1,"data":%s}`, long, goodAccount))
		}},
		{"type too long", "attribute_too_long", func(tp string) *kgo.Record {
			return envelope(tp, "h-type", ceJSON("h2", "account."+long, "h-type", "1", goodAccount))
		}},
		{"3 kB random subject equal to the key", "resource_id_too_long", func(tp string) *kgo.Record {
			return envelope(tp, subject, ceJSON("h3", "account.opened", subject, "1", goodAccount))
		}},
		{"3 kB random subject on an event that would park", "resource_id_too_long", func(tp string) *kgo.Record {
			return envelope(tp, subject, ceJSON("h4", "ledger.credited", subject, "", `{"amount_cents":5,"currency":"EUR"}`))
		}},
		{"5,000-deep nesting", "nesting_too_deep", func(tp string) *kgo.Record {
			deep := strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)
			return envelope(tp, "h-deep", ceJSON("h5", "account.opened", "h-deep", "1", deep))
		}},
		// Each of the next four used to park (its account does not
		// exist), and the first stopped its partition for good: its
		// parked row could not be encoded and the batch was retried
		// without end. Now the time is refused at decode and the others
		// are validated before the gate: dead-lettered at once.
		{"time with offset +24:00 on an event that would park", "invalid_attribute", func(tp string) *kgo.Record {
			return envelope(tp, "h-tz", `{"specversion":"1.0","id":"h7","source":"test","type":"ledger.credited","subject":"h-tz","time":"2024-01-01T00:00:00+24:00","data":{"amount_cents":5,"currency":"EUR"}}`)
		}},
		{"negative amount for an account that does not exist", "invalid_amount", func(tp string) *kgo.Record {
			return envelope(tp, "h-neg", ceJSON("h8", "ledger.credited", "h-neg", "", `{"amount_cents":-5,"currency":"EUR"}`))
		}},
		{"malformed currency for an account that does not exist", "invalid_currency", func(tp string) *kgo.Record {
			return envelope(tp, "h-cur", ceJSON("h9", "ledger.debited", "h-cur", "", `{"amount_cents":5,"currency":"eu\u0000"}`))
		}},
		{"an array for an amount, for an account that does not exist", "invalid_amount", func(tp string) *kgo.Record {
			return envelope(tp, "h-arr", ceJSON("h10", "ledger.credited", "h-arr", "", `{"amount_cents":[5],"currency":"EUR"}`))
		}},
		{"400 kB array of numbers", "invalid_payload", func(tp string) *kgo.Record {
			// Decoded in time linear in its size; the account handler then
			// refuses data that is not an account.
			return envelope(tp, "h-array", ceJSON("h6", "account.opened", "h-array", "1", numbers.String()))
		}},
	}
}

// The hostile-record catalogue, on the real broker and database with the
// real binary: each hostile record is dead-lettered with its reason and the
// good record after it on the same partition is applied; many large parked
// events of one resource are applied in order once it arrives; the
// partition's stored position moves past all of it. Every wait is a hang
// guard on a database poll, never a timing assertion.
func TestHostileRecordCatalogue(t *testing.T) {
	t.Parallel()
	r := newRig(t, 1, "EFFECTIVELY_CONSUMER_MAX_PAYLOAD_BYTES=1048576", "EFFECTIVELY_PARKING_MAX_PER_RESOURCE=1000")
	kafkatest.DeleteOnCleanup(t, r.topic+".dlq")

	type placed struct {
		hostile  hostileRecord
		offset   int64
		goodNext string // the account the next record opens
	}
	var recs []*kgo.Record
	var cases []placed
	for i, h := range hostileCatalogue() {
		good := fmt.Sprintf("good-%02d", i)
		cases = append(cases, placed{h, int64(len(recs)), good})
		recs = append(recs, h.record(r.topic))
		recs = append(recs, cetest.Account(r.topic, good, "account.opened", good, 1, "good"))
	}

	// An oversized parked payload: many ledger events with large (legal)
	// payloads for an account that does not exist yet, then the account,
	// then a good record.
	const parkedN = 60
	memo := randomText(200_000) // 60 × 200 kB: several release pages
	firstParked := int64(len(recs))
	for i := range parkedN {
		recs = append(recs, cetest.Record(r.topic, fmt.Sprintf("p-%03d", i), "ledger.credited", "parked-acct", 0,
			map[string]any{"amount_cents": i + 1, "currency": "EUR", "memo": memo}))
	}
	recs = append(recs, cetest.Account(r.topic, "parked-acct", "account.opened", "parked-acct", 1, "late"))
	recs = append(recs, cetest.Account(r.topic, "good-last", "account.opened", "good-last", 1, "good"))

	cl := kafkatest.Producer(t, kgo.DefaultProduceTopic(r.topic), kgo.ProducerBatchMaxBytes(1<<20))
	require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())

	w := r.worker(t)
	// The hang guard is generous: the machine is shared. A stopped
	// partition never gets here at all.
	r.waitApplied(t, len(recs), 4*time.Minute)
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))

	for _, c := range cases {
		t.Run(c.hostile.name, func(t *testing.T) {
			var reason, msg string
			require.NoError(t, r.db.Pool.QueryRow(context.Background(),
				`SELECT reason, error FROM dead_letters WHERE topic = $1 AND "partition" = 0 AND "offset" = $2`, r.topic, c.offset).Scan(&reason, &msg))
			require.Equal(t, c.hostile.reason, reason, "error: %s", msg)
			require.Less(t, len(msg), 1100, "the error never carries a whole payload")
			require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM accounts WHERE id = $1`, c.goodNext), "the next good record was applied")
		})
	}
	require.Equal(t, int64(len(cases)), r.db.Count(t, `SELECT count(*) FROM dead_letters`))
	require.Equal(t, int64(0), r.db.Count(t, `SELECT count(*) FROM accounts WHERE length(id) > 512`))

	// The parked events were applied once each, in their original order.
	rows, err := r.db.Pool.Query(context.Background(), `
		SELECT p."offset" FROM ledger_entries l JOIN effectively_claims p ON p.event_key = l.event_key
		WHERE l.account_id = 'parked-acct' ORDER BY l.seq`)
	require.NoError(t, err)
	var order []int64
	for rows.Next() {
		var o int64
		require.NoError(t, rows.Scan(&o))
		order = append(order, o)
	}
	require.NoError(t, rows.Err())
	require.Len(t, order, parkedN)
	for i, o := range order {
		require.Equal(t, firstParked+int64(i), o, "applied in offset order")
	}
	require.Equal(t, int64(parkedN), r.db.Count(t, `SELECT count(*) FROM parked_events WHERE resource = 'parked-acct' AND state = 'released'`))
	require.Equal(t, int64(parkedN*(parkedN+1)/2), r.db.Count(t, `SELECT balance_cents FROM account_balances WHERE account_id = 'parked-acct'`))
	require.Equal(t, int64(1), r.db.Count(t, `SELECT count(*) FROM accounts WHERE id = 'good-last'`))
	require.Equal(t, int64(0), r.db.Count(t, `SELECT count(*) FROM parked_events WHERE state = 'parked'`), "nothing that can never apply is parked")

	// The stored position moved past every record, hostile ones included.
	require.Equal(t, int64(len(recs)), r.db.Count(t,
		`SELECT next_offset FROM consumer_offsets WHERE consumer_group = $1 AND topic = $2 AND "partition" = 0`, r.group, r.topic))
}
