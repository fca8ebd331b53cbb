package event

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	testTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	otherParent     = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

// The producer's trace context arrives in the CloudEvents extension
// (structured: envelope members; binary: ce_ headers) or in plain headers;
// the extension wins, a malformed value is ignored (never dead-lettered), and
// it changes neither the key nor the payload hash.
func TestDecodeTraceContext(t *testing.T) {
	t.Parallel()
	d, err := NewDecoder(DecoderConfig{Topic: testTopic})
	require.NoError(t, err)
	jd, err := NewDecoder(DecoderConfig{Topic: testTopic, Format: FormatJSON, KeyStrategy: StrategyField,
		KeyPointer: "/id", TypePointer: "/type", SubjectPointer: "/subject"})
	require.NoError(t, err)
	plain := func(parent, state string) []Header {
		return []Header{{Key: "traceparent", Value: []byte(parent)}, {Key: "tracestate", Value: []byte(state)}}
	}
	withHeaders := func(r Record, hs ...Header) Record {
		r.Headers = append(r.Headers, hs...)
		return r
	}
	jsonRecord := Record{Topic: testTopic, Key: []byte(testKey), Value: []byte(`{"id":7,"type":"t","subject":"acc-1"}`)}
	for _, tc := range []struct {
		name          string
		dec           *Decoder
		rec           Record
		parent, state string
	}{
		{"structured extension", d, structured(event(map[string]any{"traceparent": testTraceParent, "tracestate": "k=v"})), testTraceParent, "k=v"},
		{"structured extension beats plain headers", d,
			withHeaders(structured(event(map[string]any{"traceparent": testTraceParent})), plain(otherParent, "x=y")...), testTraceParent, ""},
		{"structured, plain headers", d, withHeaders(structured(event(nil)), plain(otherParent, "x=y")...), otherParent, "x=y"},
		{"binary ce_ headers", d, binary(binaryHeaders(map[string]string{"ce_traceparent": testTraceParent, "ce_tracestate": "k=v"}), openedData), testTraceParent, "k=v"},
		{"binary, plain headers", d, binary(append(binaryHeaders(nil), plain(otherParent, "")...), openedData), otherParent, ""},
		{"format json, plain headers", jd, withHeaders(jsonRecord, plain(testTraceParent, "k=v")...), testTraceParent, "k=v"},
		{"none", d, structured(event(nil)), "", ""},
		{"not a string", d, structured(event(map[string]any{"traceparent": 42})), "", ""},
		{"uppercase hex", d, structured(event(map[string]any{"traceparent": strings.ToUpper(testTraceParent)})), "", ""},
		{"zero trace id", d, structured(event(map[string]any{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"})), "", ""},
		{"zero span id", d, structured(event(map[string]any{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"})), "", ""},
		{"version ff", d, structured(event(map[string]any{"traceparent": "ff" + testTraceParent[2:]})), "", ""},
		{"version 00 with more", d, structured(event(map[string]any{"traceparent": testTraceParent + "-00"})), "", ""},
		{"a later version with more", d, structured(event(map[string]any{"traceparent": "01" + testTraceParent[2:] + "-00"})), "01" + testTraceParent[2:] + "-00", ""},
		{"bad tracestate dropped", d, structured(event(map[string]any{"traceparent": testTraceParent, "tracestate": "k=\u00e9"})), testTraceParent, ""},
		{"long tracestate dropped", d, structured(event(map[string]any{"traceparent": testTraceParent, "tracestate": strings.Repeat("a", MaxTraceStateBytes+1)})), testTraceParent, ""},
		{"malformed plain header", d, withHeaders(structured(event(nil)), plain("00-xyz", "k=v")...), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev, err := tc.dec.Decode(tc.rec)
			require.NoError(t, err)
			require.Equal(t, tc.parent, ev.TraceParent)
			require.Equal(t, tc.state, ev.TraceState)
		})
	}

	// Not part of the identity: the same event without it has the same key
	// and hash.
	with, err := d.Decode(structured(event(map[string]any{"traceparent": testTraceParent})))
	require.NoError(t, err)
	without, err := d.Decode(structured(event(nil)))
	require.NoError(t, err)
	require.Equal(t, without.Key, with.Key)
	require.Equal(t, without.PayloadHash, with.PayloadHash)
}
