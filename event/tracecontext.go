package event

// The producer's W3C trace context (https://www.w3.org/TR/trace-context/):
// the CloudEvents distributed-tracing extension's traceparent and tracestate
// attributes (structured mode: members of the envelope; binary mode: the
// ce_traceparent and ce_tracestate headers), or else plain traceparent and
// tracestate record headers (what OpenTelemetry's Kafka instrumentations
// write, and the only place format json has). Trace context is observability:
// a malformed or oversized value is ignored, never a reason to dead-letter.

// MaxTraceStateBytes bounds a kept tracestate (W3C: at most 32 members, which
// vendors keep to 512 characters); a longer one is dropped.
const MaxTraceStateBytes = 512

// maxTraceParentBytes bounds a traceparent of a future version (version 00
// has exactly 55 characters).
const maxTraceParentBytes = 256

// traceContext returns the event's trace context: from the CloudEvents
// attributes when they carry a traceparent, else from the record headers.
// The tracestate is taken only from where the traceparent was found.
func traceContext(attrs attributes, headers []Header) (parent, state string) {
	if a := attrs.get("traceparent"); a.present && a.kind == KindString && validTraceParent(a.text) {
		parent = a.text
		if s := attrs.get("tracestate"); s.present && s.kind == KindString && validTraceState(s.text) {
			state = s.text
		}
		return parent, state
	}
	var p, s []byte
	for _, h := range headers {
		switch h.Key {
		case "traceparent":
			if p == nil {
				p = h.Value
			}
		case "tracestate":
			if s == nil {
				s = h.Value
			}
		}
	}
	if p == nil || !validTraceParent(p) {
		return "", ""
	}
	parent = string(p)
	if s != nil && validTraceState(s) {
		state = string(s)
	}
	return parent, state
}

// validTraceParent checks the traceparent syntax: version-traceid-parentid-
// flags in lowercase hex, neither ID all zeros, version ff invalid, and
// version 00 exactly 55 characters (a later version may append fields).
func validTraceParent[T string | []byte](s T) bool {
	if len(s) < 55 || len(s) > maxTraceParentBytes || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	if !lowerHex(s[0:2]) || !lowerHex(s[3:35]) || !lowerHex(s[36:52]) || !lowerHex(s[53:55]) {
		return false
	}
	switch {
	case s[0] == 'f' && s[1] == 'f':
		return false
	case s[0] == '0' && s[1] == '0' && len(s) != 55:
		return false
	case len(s) > 55 && s[55] != '-':
		return false
	}
	return !allZero(s[3:35]) && !allZero(s[36:52])
}

// validTraceState keeps a tracestate of printable ASCII within
// MaxTraceStateBytes; its list syntax is the tracer's to check.
func validTraceState[T string | []byte](s T) bool {
	if len(s) == 0 || len(s) > MaxTraceStateBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func lowerHex[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZero[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}
