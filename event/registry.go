package event

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

// Registry formats: records in the Confluent wire format (a zero magic
// byte, the schema's 4-byte big-endian ID in the registry, for Protobuf
// the message indexes, then the payload), decoded with the writer's schema
// fetched from a schema registry by ID. The payload becomes the event's
// Data as JSON (see [Wire] for the mapping of each format's types), and
// from there on the event is format-blind: envelope pointers, key
// strategies, sinks and handlers read the JSON as they read format json.
const (
	// FormatAvro: Avro binary.
	FormatAvro = "avro"
	// FormatProtobuf: a Protobuf message of the schema's file.
	FormatProtobuf = "protobuf"
	// FormatJSONSchema: JSON validated against a JSON Schema.
	FormatJSONSchema = "jsonschema"
)

// SchemaRegistry is where a decoder of a registry format finds the
// writers' schemas. franz-go's *sr.Client satisfies it; schemas are
// immutable under their ID, so the decoder asks for each once.
type SchemaRegistry interface {
	SchemaByID(ctx context.Context, id int) (sr.Schema, error)
	SchemaByVersion(ctx context.Context, subject string, version int) (sr.SubjectSchema, error)
}

// ErrSchemaRegistryUnavailable marks a decoding that failed because the
// schema registry did not answer, answered an error other than "not
// found", or refused the worker's credentials: the environment's fault,
// never the record's. Such errors are not permanent: the partition
// retries the record until the registry answers.
var ErrSchemaRegistryUnavailable = errors.New("schema registry unavailable")

// isRegistryFormat reports whether records of format are in the Confluent
// wire format.
func isRegistryFormat(format string) bool {
	return format == FormatAvro || format == FormatProtobuf || format == FormatJSONSchema
}

// schemaFormat is the registry format of a schema type.
func schemaFormat(t sr.SchemaType) string {
	switch t {
	case sr.TypeProtobuf:
		return FormatProtobuf
	case sr.TypeJSON:
		return FormatJSONSchema
	}
	return FormatAvro
}

// registryType is the registry's schema type for a format.
func registryType(format string) sr.SchemaType {
	switch format {
	case FormatProtobuf:
		return sr.TypeProtobuf
	case FormatJSONSchema:
		return sr.TypeJSON
	}
	return sr.TypeAvro
}

// Wire is how a record of a registry format was encoded: the writer's
// schema and the payload as produced. Event.Data holds the same payload as
// JSON:
//
//   - Avro: records and maps as objects, arrays as arrays, a union as its
//     branch's value (null for null), enums as their symbol, bytes and fixed
//     in base64; decimal as a string of its exact digits ("-12345.67": a
//     JSON number would be hashed as a double, and two amounts could
//     collide),
//     uuid as its string, date as "2006-01-02", time-millis and
//     time-micros as "15:04:05.000" and "15:04:05.000000",
//     timestamp-millis and timestamp-micros as RFC 3339 UTC times,
//     local-timestamp-* as the same without an offset, duration as
//     {"months", "days", "milliseconds"}; NaN and infinities as the
//     strings "NaN", "Infinity" and "-Infinity".
//   - Protobuf: the proto3 JSON mapping (protojson) with the fields' names
//     as written in the .proto file and unset fields written (scalars as
//     their zero value, messages as null) except those with presence that
//     are unset (proto3 optional, oneof members), which are absent: 64-bit
//     integers as decimal strings, enums by name, bytes in base64,
//     Timestamp as an RFC 3339 time, wrappers as their value.
//   - JSON Schema: the payload itself, once valid against its schema.
type Wire struct {
	// Format is FormatAvro, FormatProtobuf or FormatJSONSchema.
	Format string
	// SchemaID is the writer's schema's ID in the registry.
	SchemaID int
	// MessageIndexes is, for Protobuf, the path from the schema's file to
	// the message type: [1, 0] is the first message nested in the file's
	// second.
	MessageIndexes []int
	// Payload is the record value after the wire-format header. It does
	// not alias the record; never modify it.
	Payload []byte

	schema *registrySchema
	// unionBranches names the branches of the Avro unions the JSON does
	// not tell apart, for the event's hash (avroReader.branches).
	unionBranches string
}

// registryDecoder is the registry side of a Decoder: its schemas by ID,
// parsed once and kept (an ID's schema never changes). A schema the
// registry does not know, or that cannot be used, is remembered for a
// minute, so a run of poison records asks once; a registry that does not
// answer is remembered not at all.
type registryDecoder struct {
	format   string
	registry SchemaRegistry

	mu      sync.Mutex
	serial  uint64 // its key in schemaCache
	refused map[int]refusal
	// forGood are the refusals for refusalForGood, apart from refused:
	// a stream of unknown IDs cannot push them out.
	forGood map[int]refusal
	loading map[int]*loading // schemas being fetched: one fetch per ID at a time
	// maxID is the highest schema ID fetched; unknownSince, when an ID
	// near it was first answered unknown (see unknownGrace).
	maxID        int
	unknownSince map[int]time.Time
	now          func() time.Time
	limits       compileLimits // on each schema's compile (schemacompile.go)
}

// loading is one fetch in flight; done closes when s and err are set.
type loading struct {
	done chan struct{}
	s    *registrySchema
	err  error
}

type refusal struct {
	err   *DecodeError
	until time.Time
}

// refusalTTL is how long an unknown or unusable schema ID is remembered;
// maxRefusals bounds how many are (a stream of random IDs must not grow
// the decoder without end).
//
// A schema that does not compile, whose compile went past the child's
// limits or crashed it, is refused for refusalForGood instead: a schema
// never changes under its ID, and compiling it again would cost the
// compile again. Those refusals are kept apart, and when maxRefusals of
// them are live the one nearest its end makes room.
const (
	refusalTTL     = time.Minute
	refusalForGood = 24 * time.Hour
	maxRefusals    = 10_000
)

// refusedForGood marks a refusal that holds for refusalForGood.
type refusedForGood struct{ *DecodeError }

func (e *refusedForGood) Unwrap() error { return e.DecodeError }

// unknownGrace is how long an ID the registry says it does not have is
// asked again before its record is dead-lettered, when the ID is at most
// unknownIDMargin above the highest this worker has fetched: a producer
// that registers a schema and writes at once can be read before every
// registry node has it (a follower still reading its log, a replica behind
// a load balancer), and that is the environment's moment, not the
// record's fault. IDs far beyond (a poison record's) are unknown at once.
const (
	unknownGrace    = 15 * time.Second
	unknownIDMargin = 1000
)

// The compiled schemas decoders keep, in one cache for the process: at
// most maxCachedSchemaBytes by their cost (the heap their compile left, as
// the child measured it) and maxCachedSchemas in number, the least
// recently used dropped first (and compiled again if a record names it
// again). One schema may hold at most maxSchemaHeld, so at least eight
// fit: real schemas compile to kilobytes. (Records alternating among more
// schemas than fit cost a compile each: a registrant's schema per record
// costs as much.)
const (
	maxCachedSchemaBytes = 64 << 20
	maxSchemaHeld        = maxCachedSchemaBytes / 8
	maxCachedSchemas     = 10_000
)

type schemaKey struct {
	decoder uint64
	id      int
}

// schemaCache holds every decoder's compiled schemas. Its lock is taken
// after a decoder's, never before.
var schemaCache = struct {
	mu      sync.Mutex
	schemas map[schemaKey]*registrySchema
	cost    int64 // of the schemas kept
	tick    int64 // a use counter
}{schemas: map[schemaKey]*registrySchema{}}

var decoderSerials atomic.Uint64

// cachedSchema is decoder's schema id, if it is kept.
func cachedSchema(decoder uint64, id int) *registrySchema {
	c := &schemaCache
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.schemas[schemaKey{decoder, id}]
	if s != nil {
		c.tick++
		s.used = c.tick
	}
	return s
}

// keepSchema caches decoder's s, dropping the least recently used schemas
// (any decoder's) until it fits.
func keepSchema(decoder uint64, s *registrySchema) {
	c := &schemaCache
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.schemas) > 0 && (c.cost+s.cost > maxCachedSchemaBytes || len(c.schemas) >= maxCachedSchemas) {
		var lru schemaKey
		var oldest *registrySchema
		for k, o := range c.schemas {
			if oldest == nil || o.used < oldest.used {
				lru, oldest = k, o
			}
		}
		delete(c.schemas, lru)
		c.cost -= oldest.cost
	}
	c.tick++
	s.used = c.tick
	c.schemas[schemaKey{decoder, s.id}] = s
	c.cost += s.cost
}

// registrySchema is one parsed writer's schema: exactly one of its codecs
// is set, by its format.
type registrySchema struct {
	id     int
	format string // FormatAvro, FormatProtobuf or FormatJSONSchema
	avro   *avroCodec
	proto  *protoCodec
	json   *jsonSchemaCodec
	cost   int64 // bytes its compile left on the heap (schemacompile.go)
	used   int64 // schemaCache's tick when a record last named it
}

// Limits of a schema's references: how deep they nest and how many one
// schema may pull in.
const (
	maxReferenceDepth = 16
	maxReferences     = 256
)

func newRegistryDecoder(format string, registry SchemaRegistry) *registryDecoder {
	return &registryDecoder{format: format, registry: registry, serial: decoderSerials.Add(1), refused: map[int]refusal{}, forGood: map[int]refusal{},
		loading: map[int]*loading{}, unknownSince: map[int]time.Time{}, now: time.Now, limits: defaultCompileLimits}
}

// transcode strips the wire-format header from value (the record's value
// or key, as what says), finds the writer's schema and returns the
// payload as JSON with its Wire.
//
// A record key's schema gets no grace for a lagging registry node (see
// unknownGrace): keys of plain serializers can start with a zero byte too
// (a small int64), and must not hold the partition.
func (rd *registryDecoder) transcode(ctx context.Context, what string, value []byte, maxJSON int) ([]byte, *Wire, error) {
	grace := !strings.HasSuffix(what, "key")
	var h sr.ConfluentHeader
	if len(value) < 5 || value[0] != 0 {
		if len(value) > 0 && value[0] != 0 {
			return nil, nil, decodeErr(ReasonNotWireFormat, "the %s starts with byte 0x%02x, not the wire format's magic byte 0 (was it written without the registry's serializer?)", what, value[0])
		}
		return nil, nil, decodeErr(ReasonNotWireFormat, "the %s has %d bytes, fewer than the wire format's 5-byte header", what, len(value))
	}
	id, rest, _ := h.DecodeID(value)
	if id < 1 || id > math.MaxInt32 {
		// Registries number schemas from 1 with 31-bit integers;
		// Confluent's would not parse a larger ID and answer a bare 404
		// (an outage, to us), holding the partition for good.
		return nil, nil, decodeErr(ReasonUnknownSchema, "the %s names schema ID %d, outside any registry's IDs (1 to %d)", what, id, math.MaxInt32)
	}
	s, err := rd.schema(ctx, id, grace)
	if err != nil {
		return nil, nil, err
	}
	w := &Wire{Format: s.format, SchemaID: id, schema: s}
	var js []byte
	switch {
	case s.avro != nil:
		js, w.unionBranches, err = s.avro.toJSON(rest, maxJSON)
	case s.proto != nil:
		var idx []int
		idx, rest, err = h.DecodeIndex(rest, maxMessageIndexes)
		if err != nil {
			return nil, nil, decodeErr(ReasonNotWireFormat, "the Protobuf message indexes after the schema ID cannot be read")
		}
		w.MessageIndexes = idx
		js, err = s.proto.toJSON(ctx, idx, rest, maxJSON)
	default:
		js, err = s.json.check(rest)
	}
	if err != nil {
		return nil, nil, err
	}
	w.Payload = append([]byte(nil), rest...)
	if s.avro == nil && s.proto == nil {
		js = w.Payload // JSON Schema's JSON is the payload: one copy, ours, serves both
	}
	return js, w, nil
}

// schema returns the parsed schema id: from the decoder's own, or fetched
// once however many partitions ask for it at the same time.
func (rd *registryDecoder) schema(ctx context.Context, id int, grace bool) (*registrySchema, error) {
	// Every record asks: a kept schema is found under the cache's lock
	// alone. On a miss, again under the decoder's (it may have just been
	// kept by a load that ended).
	if s := cachedSchema(rd.serial, id); s != nil {
		return s, nil
	}
	rd.mu.Lock()
	if s := cachedSchema(rd.serial, id); s != nil {
		rd.mu.Unlock()
		return s, nil
	}
	for _, refused := range []map[int]refusal{rd.forGood, rd.refused} {
		if ref, ok := refused[id]; ok && rd.now().Before(ref.until) {
			rd.mu.Unlock()
			return nil, ref.err
		}
	}
	l, inFlight := rd.loading[id]
	if !inFlight {
		l = &loading{done: make(chan struct{})}
		rd.loading[id] = l
	}
	rd.mu.Unlock()
	if inFlight {
		select {
		case <-l.done:
			return l.s, l.err
		case <-ctx.Done():
			return nil, unavailable(fmt.Sprintf("waiting for schema %d", id), ctx.Err())
		}
	}

	s, err := rd.load(ctx, id)
	rd.mu.Lock()
	defer rd.mu.Unlock()
	var de *DecodeError
	switch {
	case err == nil:
		keepSchema(rd.serial, s)
		rd.maxID = max(rd.maxID, id)
		delete(rd.refused, id)
		delete(rd.forGood, id)
		delete(rd.unknownSince, id)
	case errors.As(err, &de) && de.Reason == ReasonUnknownSchema && grace && id <= rd.maxID+unknownIDMargin && rd.waitForLaggingNode(id):
		err = unavailable(fmt.Sprintf("fetching schema %d", id), fmt.Errorf("the registry has no schema %d yet, near the highest this worker has read (%d): a registry node behind the one it was registered with answers so for a moment; asked again for %s before the record is dead-lettered as unknown_schema", id, rd.maxID, unknownGrace))
	case errors.As(err, &de):
		delete(rd.unknownSince, id)
		var fg *refusedForGood
		if errors.As(err, &fg) {
			err = de
			remember(rd.forGood, id, de, rd.now(), refusalForGood, true)
		} else {
			remember(rd.refused, id, de, rd.now(), refusalTTL, false)
		}
	}
	// The outcome is final before the waiters are let go: they read it
	// without the lock.
	l.s, l.err = s, err
	delete(rd.loading, id)
	close(l.done)
	return s, err
}

// waitForLaggingNode reports whether id, which the registry says it does
// not have, is still within unknownGrace of the first such answer (and
// starts that clock). Past it, or with no room to remember one more ID
// (unknownSince full even after dropping those past their grace), the
// record is the producer's fault. rd.mu is held.
func (rd *registryDecoder) waitForLaggingNode(id int) bool {
	now := rd.now()
	since, ok := rd.unknownSince[id]
	if !ok {
		if len(rd.unknownSince) >= maxRefusals {
			for k, t := range rd.unknownSince {
				if now.Sub(t) >= unknownGrace {
					delete(rd.unknownSince, k)
				}
			}
		}
		if len(rd.unknownSince) >= maxRefusals {
			return false
		}
		rd.unknownSince[id] = now
		return true
	}
	return now.Sub(since) < unknownGrace
}

// remember records in refused that id cannot be read, for ttl, within
// maxRefusals: expired refusals go first; past the bound, the refusal
// nearest its end if makeRoom, else nothing more is remembered (each
// such record asks the registry again).
func remember(refused map[int]refusal, id int, de *DecodeError, now time.Time, ttl time.Duration, makeRoom bool) {
	if len(refused) >= maxRefusals {
		for k, r := range refused {
			if !now.Before(r.until) {
				delete(refused, k)
			}
		}
	}
	if len(refused) >= maxRefusals && makeRoom {
		first := -1
		for k, r := range refused {
			if first < 0 || r.until.Before(refused[first].until) {
				first = k
			}
		}
		delete(refused, first)
	}
	if len(refused) < maxRefusals {
		refused[id] = refusal{err: de, until: now.Add(ttl)}
	}
}

func (rd *registryDecoder) load(ctx context.Context, id int) (*registrySchema, error) {
	root, err := rd.registry.SchemaByID(ctx, id)
	if err != nil {
		if notFound(err) {
			return nil, decodeErr(ReasonUnknownSchema, "the schema registry has no schema with ID %d", id)
		}
		return nil, unavailable(fmt.Sprintf("fetching schema %d", id), err)
	}
	format := rd.format
	if format == FormatDebezium {
		// Change events come in whatever the connector's converter
		// writes: the schema says which.
		format = schemaFormat(root.Type)
	}
	if want := registryType(format); root.Type != want {
		return nil, decodeErr(ReasonUnusableSchema, "schema %d is a %s schema; the topic's format %s reads %s schemas", id, typeName(root.Type), rd.format, typeName(want))
	}
	refs, err := rd.references(ctx, id, root.Type, root.References)
	if err != nil {
		return nil, err
	}
	s, err := compileBounded(ctx, format, id, root.Schema, refs, rd.limits)
	switch {
	case err == nil:
		return s, nil
	case ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// Stopped, not refused: a revoke or a shutdown while compiling.
		return nil, unavailable(fmt.Sprintf("compiling schema %d", id), err)
	case errors.Is(err, ErrSchemaRegistryUnavailable):
		return nil, err // the compile child's environment
	default:
		// Past the child's limits, or not a schema its compiler takes:
		// either way for good, as the schema never changes.
		return nil, &refusedForGood{decodeErr(ReasonUnusableSchema, "schema %d cannot be used: %s", id, shorten(err.Error()))}
	}
}

// reference is one schema a schema refers to, by the name it refers to it
// by, in dependency order (a schema after the schemas it refers to).
type reference struct {
	name, text string
}

// references resolves refs and theirs, depth first, each subject and
// version once; each must be of the referring schema's type typ.
func (rd *registryDecoder) references(ctx context.Context, id int, typ sr.SchemaType, refs []sr.SchemaReference) ([]reference, error) {
	var out []reference
	seen := map[string]bool{}
	var walk func(refs []sr.SchemaReference, depth int) error
	walk = func(refs []sr.SchemaReference, depth int) error {
		if depth > maxReferenceDepth {
			return decodeErr(ReasonUnusableSchema, "schema %d: its references nest deeper than %d levels", id, maxReferenceDepth)
		}
		for _, r := range refs {
			key := fmt.Sprintf("%s\x00%d", r.Subject, r.Version)
			if seen[key] {
				continue
			}
			seen[key] = true
			if len(seen) > maxReferences {
				return decodeErr(ReasonUnusableSchema, "schema %d refers to more than %d schemas", id, maxReferences)
			}
			ss, err := rd.registry.SchemaByVersion(ctx, r.Subject, r.Version)
			if err != nil {
				if notFound(err) {
					return decodeErr(ReasonUnusableSchema, "schema %d refers to %s version %d, which the schema registry does not have", id, Excerpt(r.Subject), r.Version)
				}
				return unavailable(fmt.Sprintf("fetching schema %d's reference %s version %d", id, r.Subject, r.Version), err)
			}
			if ss.Type != typ {
				return decodeErr(ReasonUnusableSchema, "schema %d refers to %s version %d, a %s schema", id, Excerpt(r.Subject), r.Version, typeName(ss.Type))
			}
			if err := walk(ss.References, depth+1); err != nil {
				return err
			}
			out = append(out, reference{name: r.Name, text: ss.Schema.Schema})
		}
		return nil
	}
	return out, walk(refs, 1)
}

// notFound reports whether the registry answered that what was asked for
// does not exist: a 404 with the registry's own error code (40401 subject,
// 40402 version, 40403 schema not found). A 404 without one is a proxy or
// a wrong URL path, not an answer about the schema.
func notFound(err error) bool {
	var re *sr.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusNotFound {
		return false
	}
	switch re.ErrorCode {
	case 40401, 40402, 40403:
		return true
	}
	return false
}

// unavailable wraps a registry failure in ErrSchemaRegistryUnavailable.
func unavailable(what string, err error) error {
	var re *sr.ResponseError
	if errors.As(err, &re) {
		msg := re.Message
		if msg == "" {
			msg = string(re.Raw)
		}
		return fmt.Errorf("%w: %s: HTTP %d %s", ErrSchemaRegistryUnavailable, what, re.StatusCode, Excerpt(msg))
	}
	return fmt.Errorf("%w: %s: %w", ErrSchemaRegistryUnavailable, what, err)
}

func typeName(t sr.SchemaType) string {
	switch t {
	case sr.TypeProtobuf:
		return "Protobuf"
	case sr.TypeJSON:
		return "JSON Schema"
	}
	return "Avro"
}
