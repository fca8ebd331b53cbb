// Package cetest builds CloudEvents records for tests, the way an upstream
// producer following the contract would.
package cetest

import (
	"encoding/json"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Source is the CloudEvents source of every event built here.
const Source = "urn:test"

// Record is a structured-mode CloudEvent keyed by subject. version 0 omits
// resourceversion (relative events).
func Record(topic, id, typ, subject string, version int64, data any) *kgo.Record {
	env := map[string]any{"specversion": "1.0", "id": id, "source": Source, "type": typ, "subject": subject, "data": data}
	if version > 0 {
		env["resourceversion"] = version
	}
	v, err := json.Marshal(env)
	if err != nil {
		panic(err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(subject), Value: v,
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json")}}}
}

// Account is an account.* event with the whole state.
func Account(topic, id, typ, subject string, version int64, name string) *kgo.Record {
	return Record(topic, id, typ, subject, version, map[string]any{"name": name, "email": name + "@example.com", "plan": "pro"})
}

// Ledger is a ledger.* event.
func Ledger(topic, id, typ, subject string, cents int64, currency string) *kgo.Record {
	return Record(topic, id, typ, subject, 0, map[string]any{"amount_cents": cents, "currency": currency})
}

// Key is the dedupe key the cloudevents strategy derives for id.
func Key(id string) string { return "ce:" + itoa(len(Source)) + ":" + Source + ":" + id }

func itoa(n int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			return string(b)
		}
	}
}
