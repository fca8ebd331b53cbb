package test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/internal/cetest"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

// badInput is one kind of bad input: the record, and the reason it must be
// dead-lettered with ("" means it must be applied normally).
type badInput struct {
	name   string
	reason string
	record func(topic, key string) *kgo.Record
}

func envelope(topic, key, body string, headers ...kgo.RecordHeader) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(body), Headers: headers}
}

func ceJSON(id, typ, subject, version, data string) string {
	v := ""
	if version != "" {
		v = `,"resourceversion":` + version
	}
	return fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"urn:test","type":%q,"subject":%q%s,"data":%s}`, id, typ, subject, v, data)
}

const goodAccount = `{"name":"n","email":"n@example.com","plan":"pro"}`

var catalogue = []badInput{
	{"not JSON", "not_json", func(tp, k string) *kgo.Record { return envelope(tp, k, `{"specversion":"1.0",`) }},
	{"not CloudEvents", "not_cloudevents", func(tp, k string) *kgo.Record { return envelope(tp, k, `{"hello":"world"}`) }},
	{"missing id", "missing_id", func(tp, k string) *kgo.Record {
		return envelope(tp, k, `{"specversion":"1.0","source":"urn:test","type":"account.opened","subject":"`+k+`","resourceversion":1,"data":`+goodAccount+`}`)
	}},
	{"missing source", "missing_source", func(tp, k string) *kgo.Record {
		return envelope(tp, k, `{"specversion":"1.0","id":"x1","type":"account.opened","subject":"`+k+`","resourceversion":1,"data":`+goodAccount+`}`)
	}},
	{"missing type", "missing_type", func(tp, k string) *kgo.Record {
		return envelope(tp, k, `{"specversion":"1.0","id":"x2","source":"urn:test","subject":"`+k+`","resourceversion":1,"data":`+goodAccount+`}`)
	}},
	{"subject differs from key", "subject_mismatch", func(tp, k string) *kgo.Record {
		return envelope(tp, k, ceJSON("x3", "account.opened", "someone-else", "1", goodAccount))
	}},
	{"unknown type", "unknown_type", func(tp, k string) *kgo.Record {
		return envelope(tp, k, ceJSON("x4", "account.exploded", k, "1", goodAccount))
	}},
	{"version 0", "invalid_version", func(tp, k string) *kgo.Record {
		return envelope(tp, k, ceJSON("x5", "account.opened", k, "0", goodAccount))
	}},
	{"version negative", "invalid_version", func(tp, k string) *kgo.Record {
		return envelope(tp, k, ceJSON("x6", "account.opened", k, "-3", goodAccount))
	}},
	{"version fractional", "invalid_version", func(tp, k string) *kgo.Record {
		return envelope(tp, k, ceJSON("x7", "account.opened", k, "1.5", goodAccount))
	}},
	{"version string", "invalid_version", func(tp, k string) *kgo.Record {
		return envelope(tp, k, ceJSON("x8", "account.opened", k, `"2"`, goodAccount))
	}},
	{"wrong data types", "invalid_payload", func(tp, k string) *kgo.Record {
		return envelope(tp, k, ceJSON("x9", "account.opened", k, "1", `{"name":42,"email":"n@example.com","plan":"pro"}`))
	}},
	{"amount zero", "invalid_amount", func(tp, k string) *kgo.Record {
		return envelope(tp, k, ceJSON("x10", "ledger.credited", k, "", `{"amount_cents":0,"currency":"EUR"}`))
	}},
	{"amount negative", "invalid_amount", func(tp, k string) *kgo.Record {
		return envelope(tp, k, ceJSON("x11", "ledger.debited", k, "", `{"amount_cents":-5,"currency":"EUR"}`))
	}},
	{"amount overflowing int64", "invalid_amount", func(tp, k string) *kgo.Record {
		return envelope(tp, k, ceJSON("x12", "ledger.credited", k, "", `{"amount_cents":9223372036854775808,"currency":"EUR"}`))
	}},
	{"bad currency", "invalid_currency", func(tp, k string) *kgo.Record {
		return envelope(tp, k, ceJSON("x13", "ledger.credited", k, "", `{"amount_cents":5,"currency":"EURO"}`))
	}},
	{"payload above the limit", "too_large", func(tp, k string) *kgo.Record {
		return envelope(tp, k, ceJSON("x14", "account.opened", k, "1", `{"name":"`+strings.Repeat("n", 5000)+`","email":"n@example.com","plan":"pro"}`))
	}},
	{"invalid UTF-8", "invalid_utf8", func(tp, k string) *kgo.Record {
		return envelope(tp, k, ceJSON("x15", "account.opened", k, "1", "{\"name\":\"bad \xff\xfe\",\"email\":\"n@example.com\",\"plan\":\"pro\"}"))
	}},
	{"binary mode without ce_ headers", "missing_binary_headers", func(tp, k string) *kgo.Record {
		return envelope(tp, k, goodAccount, kgo.RecordHeader{Key: "ce_id", Value: []byte("x16")}, kgo.RecordHeader{Key: "ce_type", Value: []byte("account.opened")})
	}},
	{"empty value", "empty_value", func(tp, k string) *kgo.Record { return &kgo.Record{Topic: tp, Key: []byte(k)} }},
	// The next four are for an account that does not exist (and never
	// will): they used to be parked — the gate ran before validation —
	// and the first stopped its partition for good (its parked row could
	// not be encoded). Now: dead-lettered at once, nothing parked.
	{"time offset +24:00, account missing", "invalid_attribute", func(tp, k string) *kgo.Record {
		return envelope(tp, "ghost-"+k, `{"specversion":"1.0","id":"x19","source":"urn:test","type":"ledger.credited","subject":"ghost-`+k+`","time":"2024-01-01T00:00:00+24:00","data":{"amount_cents":5,"currency":"EUR"}}`)
	}},
	{"amount negative, account missing", "invalid_amount", func(tp, k string) *kgo.Record {
		return envelope(tp, "ghost-"+k, ceJSON("x20", "ledger.credited", "ghost-"+k, "", `{"amount_cents":-5,"currency":"EUR"}`))
	}},
	{"amount an array, account missing", "invalid_amount", func(tp, k string) *kgo.Record {
		return envelope(tp, "ghost-"+k, ceJSON("x21", "ledger.debited", "ghost-"+k, "", `{"amount_cents":[5],"currency":"EUR"}`))
	}},
	{"currency malformed, account missing", "invalid_currency", func(tp, k string) *kgo.Record {
		return envelope(tp, "ghost-"+k, ceJSON("x22", "ledger.credited", "ghost-"+k, "", `{"amount_cents":5,"currency":"e\u0000r"}`))
	}},
	{"same id, different payload", "conflict", func(tp, k string) *kgo.Record {
		// The good record before it (see below) used id "dup-<k>".
		return envelope(tp, k, ceJSON("dup-"+k, "account.opened", k, "1", `{"name":"other","email":"o@example.com","plan":"free"}`))
	}},
	{"forged retry and attempt headers", "", func(tp, k string) *kgo.Record {
		return envelope(tp, k, ceJSON("x18", "account.updated", k, "2", goodAccount),
			kgo.RecordHeader{Key: "retry-count", Value: []byte("99")}, kgo.RecordHeader{Key: "x-attempts", Value: []byte("1000")},
			kgo.RecordHeader{Key: "effectively.reason", Value: []byte("conflict")}, kgo.RecordHeader{Key: "content-type", Value: []byte("application/cloudevents+json")})
	}},
}

// A catalogue of bad input, each kind dead-lettered with its own reason —
// in dead_letters and on the .dlq topic — while the good record after it on
// the same partition is applied. Forged retry/attempt headers change
// nothing.
func TestBadInputCatalogue(t *testing.T) {
	t.Parallel()
	r := newRig(t, 1, "EFFECTIVELY_CONSUMER_MAX_PAYLOAD_BYTES=4096")
	kafkatest.DeleteOnCleanup(t, r.topic+".dlq")
	var recs []*kgo.Record
	for i, c := range catalogue {
		k := fmt.Sprintf("acct-%02d", i)
		// A good record first, then the bad one, then another good one.
		recs = append(recs, cetest.Account(r.topic, "dup-"+k, "account.opened", k, 1, "first"))
		recs = append(recs, c.record(r.topic, k))
		recs = append(recs, cetest.Ledger(r.topic, "after-"+k, "ledger.credited", k, 7, "EUR"))
	}
	cl := kafkatest.Producer(t, kgo.DefaultProduceTopic(r.topic), kgo.ProducerBatchMaxBytes(1<<20))
	require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())

	w := r.worker(t)
	r.waitApplied(t, len(recs), 2*time.Minute)
	dead := 0
	for _, c := range catalogue {
		if c.reason != "" {
			dead++
		}
	}
	dlq := kafkatest.ReadCommitted(t, r.topic+".dlq", dead, 90*time.Second)
	onDLQ := map[string]string{}
	for _, rec := range dlq {
		h := map[string]string{}
		for _, kv := range rec.Headers {
			h[kv.Key] = string(kv.Value)
		}
		onDLQ[h["effectively.origin.offset"]] = h["effectively.reason"]
	}
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	// One log line per dead letter: reason, event id and origin, never the
	// payload; and group, instance and version on every line.
	logged := 0
	for _, line := range strings.Split(w.stderr.String(), "\n") {
		if line == "" {
			continue
		}
		var l map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &l), line)
		require.Equal(t, r.group, l["group"], "every worker line names its group: %s", line)
		require.Contains(t, l, "version", line)
		require.Contains(t, l, "instance_id", line)
		if l["msg"] != "event dead-lettered; see `dlq list --reason` and `dlq show ID`" {
			continue
		}
		logged++
		require.Equal(t, r.topic, l["topic"], line)
		require.Contains(t, l, "offset", line)
		require.Contains(t, l, "event_id", line)
		require.NotEmpty(t, l["reason"], line)
		require.NotContains(t, line, "o@example.com", "never the payload")
		require.NotContains(t, l, "error", "never the error text (it can carry data)")
	}
	require.Equal(t, dead, logged, "one line per dead letter")

	for i, c := range catalogue {
		t.Run(c.name, func(t *testing.T) {
			k := fmt.Sprintf("acct-%02d", i)
			offset := int64(3*i + 1)
			if c.reason == "" {
				require.Equal(t, int64(0), r.db.Count(t, `SELECT count(*) FROM dead_letters WHERE "offset" = $1`, offset), "not dead-lettered")
				require.Equal(t, int64(2), r.db.Count(t, `SELECT version FROM accounts WHERE id = $1`, k), "applied normally")
			} else {
				var reason, msg string
				require.NoError(t, r.db.Pool.QueryRow(context.Background(),
					`SELECT reason, error FROM dead_letters WHERE topic = $1 AND "partition" = 0 AND "offset" = $2`, r.topic, offset).Scan(&reason, &msg))
				require.Equal(t, c.reason, reason, "error: %s", msg)
				require.Equal(t, c.reason, onDLQ[fmt.Sprint(offset)], "on the .dlq topic with its reason")
				require.Less(t, len(msg), 1100, "the error never carries a whole payload")
			}
			// The good records around it were applied.
			require.Equal(t, int64(7), r.db.Count(t, `SELECT coalesce(sum(amount_cents), 0) FROM ledger_entries WHERE account_id = $1`, k))
		})
	}
	require.Equal(t, int64(dead), r.db.Count(t, `SELECT count(*) FROM dead_letters`))
	require.Equal(t, int64(0), r.db.Count(t, `SELECT count(*) FROM parked_events`), "nothing that can never apply was parked")

	// The operator's view: list by reason, show one, redrive (what is still
	// bad stays dead, with one more attempt).
	code, out, stderr := runCmd(t, r.env, "dlq", "list", "--reason", "invalid_version", "--json")
	require.Equal(t, 0, code, stderr)
	var listed []struct {
		ID     int64  `json:"id"`
		Reason string `json:"reason"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed, 4)
	code, out, stderr = runCmd(t, r.env, "dlq", "show", fmt.Sprint(listed[0].ID))
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "invalid_version")
	require.Contains(t, out, "origin       "+r.topic+"/0@")
	// A filter may select many: without a terminal, redrive refuses without
	// --yes and names what it would do; nothing is redriven.
	code, _, stderr = runCmd(t, r.env, "dlq", "redrive", "--reason", "invalid_version")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, fmt.Sprintf("this would re-apply 4 unresolved dead letters (--reason invalid_version), IDs %d, %d, %d, %d", listed[0].ID, listed[1].ID, listed[2].ID, listed[3].ID))
	require.Contains(t, stderr, "confirm with --yes")
	require.Equal(t, int64(4), r.db.Count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'invalid_version' AND attempts = 1`), "nothing redriven")
	code, out, stderr = runCmd(t, r.env, "dlq", "redrive", "--reason", "invalid_version", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "0 of 4 redriven dead letters resolved")
	require.Equal(t, int64(4), r.db.Count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'invalid_version' AND attempts = 2`))
	// One by ID, the way show names it; the older --id still works, with a
	// deprecation note.
	code, out, stderr = runCmd(t, r.env, "dlq", "redrive", fmt.Sprint(listed[0].ID), "--json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, fmt.Sprintf(`"id": %d`, listed[0].ID))
	code, _, stderr = runCmd(t, r.env, "dlq", "redrive", "--id", fmt.Sprint(listed[1].ID))
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "deprecated")
	require.Equal(t, int64(2), r.db.Count(t, `SELECT count(*) FROM dead_letters WHERE reason = 'invalid_version' AND attempts = 3`))
	code, _, _ = runCmd(t, r.env, "dlq", "redrive", "not-an-id")
	require.Equal(t, 2, code)
}
