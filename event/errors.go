package event

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Reason is a dead-letter reason code: lowercase snake_case, one per kind of
// bad input. Reason codes are part of the product (dead-letter rows, metrics
// labels, alerts): never rename one.
type Reason string

// The reasons Decode gives, roughly in the order it checks for them.
const (
	// ReasonEmptyValue: the record's value is null or empty.
	ReasonEmptyValue Reason = "empty_value"
	// ReasonTooLarge: the value is longer than MaxPayloadBytes.
	ReasonTooLarge Reason = "too_large"
	// ReasonInvalidUTF8: the value, a header the decoder reads
	// (content-type, ce_*), or the record key where it stands for the
	// resource ID, is not valid UTF-8.
	ReasonInvalidUTF8 Reason = "invalid_utf8"
	// ReasonMissingBinaryHeaders: the record carries ce_* headers but no
	// ce_specversion, so it is neither a binary-mode event nor plainly a
	// structured one.
	ReasonMissingBinaryHeaders Reason = "missing_binary_headers"
	// ReasonNotJSON: the value (the envelope in structured mode, the data in
	// binary mode, the payload for format json) is not JSON.
	ReasonNotJSON Reason = "not_json"
	// ReasonNotCloudEvents: valid JSON but not a CloudEvents 1.0 envelope: not
	// an object, no or another specversion, a repeated member name or ce_
	// header, an attribute name that is not lowercase letters and digits,
	// batch mode.
	ReasonNotCloudEvents Reason = "not_cloudevents"
	// ReasonMissingID: the id is absent, null or empty.
	ReasonMissingID Reason = "missing_id"
	// ReasonMissingSource: the source is absent, null or empty.
	ReasonMissingSource Reason = "missing_source"
	// ReasonMissingType: the type is absent, null or empty.
	ReasonMissingType Reason = "missing_type"
	// ReasonMissingSubject: the subject (the resource ID) is absent, null or
	// empty.
	ReasonMissingSubject Reason = "missing_subject"
	// ReasonSubjectMismatch: the subject differs from the record key; the
	// producer did not key the record by resource ID, so per-resource order
	// cannot be trusted.
	ReasonSubjectMismatch Reason = "subject_mismatch"
	// ReasonInvalidAttribute: an attribute is present with the wrong JSON
	// type (an id that is a number, an extension that is an object), a
	// string attribute holds characters CloudEvents forbids (control
	// characters, noncharacters, lone surrogates), or time is not an RFC 3339
	// timestamp. For format json: a mapped field of the wrong type or with
	// such characters.
	ReasonInvalidAttribute Reason = "invalid_attribute"
	// ReasonInvalidVersion: resourceversion is present but not an integer
	// from 1 to 2^63-1 written in plain decimal digits (0, negative,
	// fractional, an exponent, a JSON string in structured mode, too large).
	ReasonInvalidVersion Reason = "invalid_version"
	// ReasonUnsupportedData: the data is not JSON by declaration:
	// data_base64, or a datacontenttype / content-type that is no JSON media
	// type.
	ReasonUnsupportedData Reason = "unsupported_data"
	// ReasonInvalidData: the data is JSON but not I-JSON (RFC 7493), so it
	// has no canonical form to hash: a repeated member name, a lone
	// surrogate escape, a number beyond the range of a double.
	ReasonInvalidData Reason = "invalid_data"
	// ReasonMissingKeyField: a key pointer of strategy field or natural
	// finds nothing, or a value that cannot be a key.
	ReasonMissingKeyField Reason = "missing_key_field"
	// ReasonAttributeTooLong: the id, source or type is longer than
	// MaxAttributeBytes.
	ReasonAttributeTooLong Reason = "attribute_too_long"
	// ReasonResourceIDTooLong: the resource ID (the subject, the
	// partitionkey extension or the record key that stands for them) is
	// longer than MaxResourceIDBytes.
	ReasonResourceIDTooLong Reason = "resource_id_too_long"
	// ReasonNestingTooDeep: the JSON (the envelope's data, or the whole
	// payload for format json) nests arrays and objects deeper than
	// MaxNesting.
	ReasonNestingTooDeep Reason = "nesting_too_deep"
	// ReasonNotWireFormat: for a registry format (avro, protobuf,
	// jsonschema), the value does not start with the Confluent wire
	// format's header: a magic byte 0 and a 4-byte schema ID (for Protobuf,
	// readable message indexes after them). It was written without the
	// registry's serializer.
	ReasonNotWireFormat Reason = "not_wire_format"
	// ReasonUnknownSchema: the schema registry answers that it has no
	// schema with the record's schema ID (another registry's ID, a deleted
	// schema, a corrupted header).
	ReasonUnknownSchema Reason = "unknown_schema"
	// ReasonUnusableSchema: the record's schema exists but cannot read it:
	// a schema of another type than the topic's format (a Protobuf schema
	// on an Avro topic), a reference the registry does not have, or a
	// schema that does not compile.
	ReasonUnusableSchema Reason = "unusable_schema"
	// ReasonSchemaMismatch: the payload is not a value of its own schema: a
	// truncated payload, bytes after the value, an index outside an enum or
	// a union, an invalid JSON Schema instance, Protobuf fields the schema
	// does not define.
	ReasonSchemaMismatch Reason = "schema_mismatch"
	// ReasonNotDebezium: for format debezium, the value is JSON but not a
	// change event: not an object, no op or an unknown one, no source or
	// no table in it.
	ReasonNotDebezium Reason = "not_debezium"
)

// ReasonHandlerError: a handler failed permanently without a more specific
// reason (Permanent on an error that carries none), or one of its statements
// failed on the event's data (SQLSTATE class 22 or 23) and the batch, redone
// one event at a time, dead-lettered that event alone.
const ReasonHandlerError Reason = "handler_error"

// DecodeReasons returns every reason Decode can give (for metrics that
// pre-register their labels, and for docs).
func DecodeReasons() []Reason {
	return []Reason{
		ReasonEmptyValue, ReasonTooLarge, ReasonInvalidUTF8,
		ReasonMissingBinaryHeaders, ReasonNotJSON, ReasonNotCloudEvents,
		ReasonMissingID, ReasonMissingSource, ReasonMissingType,
		ReasonMissingSubject, ReasonSubjectMismatch, ReasonInvalidAttribute,
		ReasonInvalidVersion, ReasonUnsupportedData, ReasonInvalidData,
		ReasonMissingKeyField, ReasonAttributeTooLong, ReasonResourceIDTooLong,
		ReasonNestingTooDeep, ReasonNotWireFormat, ReasonUnknownSchema,
		ReasonUnusableSchema, ReasonSchemaMismatch, ReasonNotDebezium,
	}
}

// DecodeError reports a record that can never be decoded: retrying cannot
// help, so the consumer dead-letters it with Reason. Msg says what was wrong;
// it quotes at most a 64-byte prefix of an offending value and never the
// payload.
type DecodeError struct {
	Reason Reason
	Msg    string
}

// Error returns the reason, a colon and the message.
func (e *DecodeError) Error() string {
	return string(e.Reason) + ": " + e.Msg
}

func decodeErr(reason Reason, format string, args ...any) *DecodeError {
	return &DecodeError{Reason: reason, Msg: fmt.Sprintf(format, args...)}
}

// PermanentError marks an error that retrying cannot fix: the event is
// dead-lettered with Reason and its claim kept as dead_lettered, instead of
// the transaction being rolled back and retried (river's JobCancel plays the
// same role).
type PermanentError struct {
	Reason Reason
	Err    error
}

// Error names the reason and the wrapped error.
func (e *PermanentError) Error() string {
	if e.Err == nil {
		return "permanent failure (" + string(e.Reason) + ")"
	}
	return "permanent failure (" + string(e.Reason) + "): " + e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as permanent. Its reason is that of a DecodeError or
// PermanentError err already carries, ReasonHandlerError otherwise.
// Permanent(nil) is nil, so `return Permanent(err)` is safe after a call
// that may succeed.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	reason := ReasonOf(err)
	if reason == "" {
		reason = ReasonHandlerError
	}
	return &PermanentError{Reason: reason, Err: err}
}

// PermanentWithReason marks err as permanent with the given dead-letter
// reason. Unlike Permanent it never returns nil: a handler that decides an
// event is bad may have no underlying error to give.
func PermanentWithReason(reason Reason, err error) error {
	return &PermanentError{Reason: reason, Err: err}
}

// IsPermanent reports whether err, or any error it wraps, is a
// PermanentError or a DecodeError.
func IsPermanent(err error) bool {
	var pe *PermanentError
	var de *DecodeError
	return errors.As(err, &pe) || errors.As(err, &de)
}

// ReasonOf returns the dead-letter reason of the outermost PermanentError or
// DecodeError in err's chain, or "" when there is none.
func ReasonOf(err error) Reason {
	for err != nil {
		switch e := err.(type) {
		case *PermanentError:
			return e.Reason
		case *DecodeError:
			return e.Reason
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				if r := ReasonOf(inner); r != "" {
					return r
				}
			}
			return ""
		default:
			return ""
		}
	}
	return ""
}

// excerptBytes is how much of an offending value an error message may quote.
const excerptBytes = 64

// Excerpt quotes at most the first 64 bytes of s for an error message, with
// control characters and invalid UTF-8 escaped, and marks a cut with "...".
func Excerpt(s string) string {
	if len(s) <= excerptBytes {
		return strconv.Quote(s)
	}
	return strconv.Quote(cutUTF8(s, excerptBytes)) + "..."
}

// cutUTF8 is s's first n bytes, less a character they would split in two.
func cutUTF8(s string, n int) string {
	cut := s[:n]
	for i := len(cut) - 1; i >= 0 && i >= len(cut)-utf8.UTFMax; i-- {
		if utf8.RuneStart(cut[i]) {
			if !utf8.FullRuneInString(cut[i:]) {
				cut = cut[:i]
			}
			break
		}
	}
	return cut
}
