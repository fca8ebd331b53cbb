package event

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

func TestZZReviewAvroSequence(t *testing.T) {
	env := strings.Replace(dbzEnvelopeAvro, `{"name":"lsn","type":["null","long"],"default":null}]}},`,
		`{"name":"lsn","type":["null","long"],"default":null},{"name":"sequence","type":["null","string"],"default":null}]}},`, 1)
	reg := newMemRegistry()
	reg.add(10, "src.public.customers-value", 1, sr.Schema{Schema: env})
	reg.add(11, "src.public.customers-key", 1, sr.Schema{Schema: dbzKeyAvro})
	d, err := NewDecoder(DecoderConfig{Topic: "src.public.customers", Format: FormatDebezium, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	row := func(status string) map[string]any {
		return map[string]any{"src.public.customers.Value": map[string]any{"id": int64(1), "name": "customer 1", "status": status}}
	}
	value := avroPayload(nil, env, map[string]any{
		"before": row("new"), "after": row("active"),
		"source": map[string]any{"version": "3.6.1.Final", "connector": "postgresql", "name": "src", "ts_ms": int64(1796324500000),
			"snapshot": map[string]any{"string": "false"}, "db": "source", "schema": "public", "table": "customers",
			"txId": map[string]any{"long": int64(747)}, "lsn": map[string]any{"long": int64(24263856)},
			"sequence": map[string]any{"string": `["24263000","24263856"]`}},
		"op": "u", "ts_ms": map[string]any{"long": int64(1)}, "transaction": nil,
	})
	ev, err := d.Decode(Record{Key: wire(11, nil, avroPayload(nil, dbzKeyAvro, map[string]any{"id": int64(1)})), Value: wire(10, nil, value)})
	t.Logf("avro: v=%d s=%d err=%v", ev.Version, ev.Sequence, err)
}

func TestZZReviewSequences(t *testing.T) {
	d := dbzDecoder(t)
	for _, seq := range []string{
		`"[\"50\",\"100\"]"`, `"[\"50\"]"`, `"[\"50\",]"`, `"[\"50\",\"100\",\"x\"]"`, `"[\"50\",\"zz\"]"`, `"[\"50\", 7]"`,
		`"[\"999999999999999999\",\"100\"]"`, `"[\"9223372036854775807\",\"100\"]"`, `"[\"99999999999999999999999\",\"100\"]"`,
		`"[\"0\",\"100\"]"`, `"[\"00\",\"100\"]"`, `"[null ,\"100\"]"`, `"[\t\"5\",\"100\"]"`, `"[\"5\"\n,\"100\"]"`, `"[\"\\u0035\",\"100\"]"`,
		`"[\"500\",\"100\"]"`, `"[\"5000000000\",\"100\"]"`, `""`, `"["`, `"[,]"`, `"[\"\",\"100\"]"`, `"[\"+5\",\"100\"]"`,
		`"[\"1e3\",\"100\"]"`,
	} {
		v := strings.Replace(dbzUpdate, `"sequence":"[null,\"24263856\"]"`, `"sequence":`+seq, 1)
		v = strings.Replace(v, `"lsn":24263856`, `"lsn":100`, 1)
		ev, err := d.Decode(dbzRecord(v))
		t.Logf("%-50s v=%d s=%d reason=%q", seq, ev.Version-StreamedVersion, ev.Sequence, ReasonOf(err))
	}
}
