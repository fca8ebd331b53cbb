package event

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/bufbuild/protocompile"
	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

// maxMessageIndexes bounds the message indexes of a Protobuf record: how
// deeply the message type nests in its file.
const maxMessageIndexes = 32

// protoCodec reads Protobuf messages of one writer's schema: the .proto
// file the registry holds, compiled with its references (and the
// well-known types) by protocompile, read as dynamic messages.
type protoCodec struct {
	file protoreflect.FileDescriptor
	// types resolves the schema's own messages and extensions (an Any of
	// one of them, a proto2 extension it declares).
	types *dynamicpb.Types

	mu       sync.Mutex
	messages map[string]protoreflect.MessageDescriptor // by the indexes' text
	base     map[protoreflect.FullName]int             // baseSize by message type
}

func newProtoCodec(ctx context.Context, id int, text string, refs []reference) (*protoCodec, error) {
	srcs := make(map[string]string, len(refs)+1)
	for _, r := range refs {
		srcs[r.name] = r.text
	}
	// The root needs a name no import can take.
	root := fmt.Sprintf("effectively/registry/schema-%d.proto", id)
	srcs[root] = text
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(srcs),
		}),
		MaxParallelism: 1,
	}
	files, err := c.Compile(ctx, root)
	if err != nil {
		return nil, err
	}
	if files[0].Messages().Len() == 0 {
		return nil, errors.New("the file defines no message")
	}
	reg := new(protoregistry.Files)
	var register func(fd protoreflect.FileDescriptor) error
	register = func(fd protoreflect.FileDescriptor) error {
		if _, err := reg.FindFileByPath(fd.Path()); err == nil {
			return nil
		}
		for i := range fd.Imports().Len() {
			if err := register(fd.Imports().Get(i).FileDescriptor); err != nil {
				return err
			}
		}
		return reg.RegisterFile(fd)
	}
	if err := register(files[0]); err != nil {
		return nil, err
	}
	return &protoCodec{file: files[0], types: dynamicpb.NewTypes(reg),
		messages: map[string]protoreflect.MessageDescriptor{}, base: map[protoreflect.FullName]int{}}, nil
}

// message returns the message type at idx.
func (c *protoCodec) message(idx []int) (protoreflect.MessageDescriptor, error) {
	key := fmt.Sprint(idx)
	c.mu.Lock()
	md := c.messages[key]
	c.mu.Unlock()
	if md != nil {
		return md, nil
	}
	msgs := c.file.Messages()
	for n, i := range idx {
		if i < 0 || i >= msgs.Len() {
			return nil, decodeErr(ReasonSchemaMismatch, "message index %v: the schema has no message %d at level %d", idx, i, n+1)
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	c.mu.Lock()
	c.messages[key] = md
	c.mu.Unlock()
	return md, nil
}

func (c *protoCodec) toJSON(ctx context.Context, idx []int, payload []byte, maxJSON int) ([]byte, error) {
	md, err := c.message(idx)
	if err != nil {
		return nil, err
	}
	cost := c.decodeCost(md, payload, 1, maxProtoDecodeHeap)
	if cost > maxProtoDecodeHeap {
		return nil, decodeErr(ReasonTooLarge, "the payload would take more than %s of memory as %s messages (effectively decodes at most that of one record; it is %s bytes of wire format)", bytesText(maxProtoDecodeHeap), md.FullName(), english.Sprint(len(payload)))
	}
	// What the messages take is held until they are written as JSON;
	// the process's decodes share maxProtoDecodeHeap of it.
	held := int64(max(cost, 1))
	if err := protoDecodeHeap.Acquire(ctx, held); err != nil {
		return nil, err
	}
	defer protoDecodeHeap.Release(held)
	m := dynamicpb.NewMessage(md)
	if err := (proto.UnmarshalOptions{RecursionLimit: MaxNesting, Resolver: c.types}).Unmarshal(payload, m); err != nil {
		if strings.Contains(err.Error(), "recursion") || strings.Contains(err.Error(), "nesting") {
			return nil, decodeErr(ReasonNestingTooDeep, "the message nests deeper than %d levels", MaxNesting)
		}
		return nil, decodeErr(ReasonSchemaMismatch, "the payload is not a %s message: %v", md.FullName(), err)
	}
	budget := maxJSON
	path, ok := c.inspect(m.ProtoReflect(), &budget, 1)
	if budget <= anyTooDeep {
		return nil, decodeErr(ReasonNestingTooDeep, "the message nests deeper than %d levels (counting the messages its Any fields hold)", MaxNesting)
	}
	if ok {
		return nil, decodeErr(ReasonSchemaMismatch, "the payload has fields its schema (%s) does not define, at %s: not a message of this schema", md.FullName(), path)
	}
	if budget < 0 {
		// Unset fields are written too: a few bytes of empty messages can
		// be megabytes of JSON. Refused before it is built.
		return nil, decodeErr(ReasonTooLarge, "the payload would decode to more than %d bytes of JSON", maxJSON)
	}
	js, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true, Resolver: c.types}.Marshal(m)
	if err != nil {
		return nil, decodeErr(ReasonSchemaMismatch, "the %s message has no JSON form: %v", md.FullName(), err)
	}
	if len(js) > maxJSON {
		return nil, decodeErr(ReasonTooLarge, "the payload decodes to %d bytes of JSON, more than %d", len(js), maxJSON)
	}
	return js, nil
}

// maxProtoDecodeHeap bounds the memory one record's dynamic messages may
// take. Unmarshal builds a message, its fields and its lists before
// anything else sees them: two bytes of wire format (an empty element of
// a repeated message field) are a message of about 400 bytes, so a 1 MiB
// record could build 180 MiB. decodeCost weighs that first, from the wire
// format alone. Real records take a few to forty times their size (a
// 900 KB record of 50,000 line items and 400,000 packed numbers: 59 MiB).
const maxProtoDecodeHeap = 64 << 20

// protoDecodeHeap bounds the memory of the process's Protobuf decodes at
// once, by their weight (decodeCost): a record may take 64 MiB of
// messages for a few hundred KB of wire format, and partitions decode in
// parallel. A decode waits for room; it holds nothing else of the kind.
var protoDecodeHeap = semaphore.NewWeighted(maxProtoDecodeHeap)

// What Unmarshal builds, in bytes of heap at its peak, from above
// (measured with dynamicpb: an empty message and its place in a list take
// 350 to 660 bytes allocated, a set field 60 to 80, a map entry 100 more; a
// list's value is 24 bytes, but the list grows by doubling and is read
// again for the JSON: 1 MiB of packed zeros peaked at 60 to 72 MiB, 1 MiB
// of empty strings at 37).
const (
	protoMessageCost = 512
	protoValueCost   = 80 // a field set in a message: its value and its slot
	protoListCost    = 64 // a packed value in a list
	protoEntryCost   = 128
	protoBytesCost   = 64 // and the bytes themselves
)

// decodeCost is about what unmarshalling b as an md builds, at least;
// it stops counting past limit. Extensions are weighed as the fields they
// are, and an Any's message twice (inspect and protojson each unmarshal
// it again). Malformed wire format is left for Unmarshal to refuse.
func (c *protoCodec) decodeCost(md protoreflect.MessageDescriptor, b []byte, depth, limit int) int {
	cost, _ := c.scanCost(md, b, depth, limit, 0)
	return cost
}

// scanCost weighs b as an md up to its end or, inside a group (group is
// its field number), up to the group's end, in one pass; it returns the
// cost and the bytes read.
func (c *protoCodec) scanCost(md protoreflect.MessageDescriptor, b []byte, depth, limit int, group protowire.Number) (int, int) {
	cost := protoMessageCost
	if depth > MaxNesting {
		return cost, len(b) // Unmarshal refuses it
	}
	if md.FullName() == "google.protobuf.Any" {
		return cost + c.anyCost(b, depth, limit), len(b)
	}
	fields := md.Fields()
	read := 0
	for read < len(b) && cost <= limit {
		num, typ, n := protowire.ConsumeTag(b[read:])
		if n < 0 {
			return cost, len(b)
		}
		read += n
		if typ == protowire.EndGroupType {
			if num == group {
				return cost, read
			}
			return cost, len(b)
		}
		fd := fields.ByNumber(num)
		if fd == nil && md.ExtensionRanges().Has(num) && c.types != nil {
			if xt, err := c.types.FindExtensionByNumber(md.FullName(), num); err == nil {
				fd = xt.TypeDescriptor()
			}
		}
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b[read:])
			if n < 0 {
				return cost, len(b)
			}
			read += n
			switch {
			case fd == nil:
				cost += protoBytesCost + len(v)
			case fd.IsMap():
				cost += protoEntryCost + c.decodeCost(fd.Message(), v, depth+1, limit-cost)
			case fd.Message() != nil:
				cost += protoValueCost + c.decodeCost(fd.Message(), v, depth+1, limit-cost)
			case fd.IsList() && fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.BytesKind:
				cost += protoListCost * packedCount(fd.Kind(), v)
			default:
				cost += protoBytesCost + len(v)
			}
		case protowire.StartGroupType:
			var inner protoreflect.MessageDescriptor
			if fd != nil {
				inner = fd.Message()
			}
			if inner == nil {
				// Unknown: kept as its bytes.
				v, n := protowire.ConsumeGroup(num, b[read:])
				if n < 0 {
					return cost, len(b)
				}
				read += n
				cost += protoBytesCost + len(v)
				continue
			}
			gc, n := c.scanCost(inner, b[read:], depth+1, limit-cost, num)
			read += n
			cost += protoValueCost + gc
		default:
			n := protowire.ConsumeFieldValue(num, typ, b[read:])
			if n < 0 {
				return cost, len(b)
			}
			read += n
			cost += protoValueCost
		}
	}
	return cost, read
}

// anyCost weighs an Any's message (b is the Any) as inspect and protojson
// build it: twice.
func (c *protoCodec) anyCost(b []byte, depth, limit int) int {
	var url string
	var value []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return 0
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0
		}
		b = b[n:]
		switch num {
		case 1:
			url = string(v)
		case 2:
			value = v
		}
	}
	cost := protoBytesCost + len(url) + len(value)
	if c.types == nil {
		return cost
	}
	mt, err := c.types.FindMessageByURL(url)
	if err != nil {
		return cost // no JSON form: Marshal refuses it
	}
	return cost + 2*c.decodeCost(mt.Descriptor(), value, depth+1, limit/2)
}

// packedCount is how many values a packed field of kind holds in v.
func packedCount(kind protoreflect.Kind, v []byte) int {
	switch kind {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return len(v) / 4
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return len(v) / 8
	}
	n := 0
	for _, c := range v {
		if c < 0x80 {
			n++ // a varint's last byte
		}
	}
	return n
}

// inspect reports where m, or a message in it, holds fields its
// descriptor does not define (the writer's schema is in the record, so a
// writer never has fields its reader lacks: unknown fields are bytes that
// only happened to parse), and takes from budget at least as many bytes
// as m's JSON will have; it stops early once budget is spent.
//
// depth is m's nesting. Each Any is parsed afresh (its own recursion
// limit), so a chain of Anys each holding the next would be parsed again
// at every level: depth counts them too, and past MaxNesting inspect sets
// budget to anyTooDeep and stops.
func (c *protoCodec) inspect(m protoreflect.Message, budget *int, depth int) (string, bool) {
	if depth > MaxNesting {
		*budget = anyTooDeep
		return "", false
	}
	if len(m.GetUnknown()) > 0 {
		return string(m.Descriptor().FullName()), true
	}
	if m.Descriptor().FullName() == "google.protobuf.Any" {
		// protojson writes an Any as the message it holds: inspect that.
		fields := m.Descriptor().Fields()
		url := m.Get(fields.ByName("type_url")).String()
		mt, err := c.types.FindMessageByURL(url)
		if err != nil {
			return "", false // no JSON form; Marshal refuses it
		}
		inner := mt.New()
		if err := (proto.UnmarshalOptions{RecursionLimit: MaxNesting, Resolver: c.types}).Unmarshal(m.Get(fields.ByName("value")).Bytes(), inner.Interface()); err != nil {
			return string(m.Descriptor().FullName()) + " (" + url + ")", true
		}
		*budget -= len(url) + 12
		return c.inspect(inner, budget, depth+1)
	}
	*budget -= c.baseSize(m.Descriptor())
	var path string
	var found bool
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				*budget -= valueSize(fd.MapKey(), k.Value()) + 2
				if fd.MapValue().Message() != nil {
					path, found = c.inspect(mv.Message(), budget, depth+1)
				} else {
					*budget -= valueSize(fd.MapValue(), mv)
				}
				return !found && *budget >= 0
			})
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && !found && *budget >= 0; i++ {
				*budget--
				if fd.Message() != nil {
					path, found = c.inspect(l.Get(i).Message(), budget, depth+1)
				} else {
					*budget -= valueSize(fd, l.Get(i))
				}
			}
		case fd.Message() != nil:
			path, found = c.inspect(v.Message(), budget, depth+1)
		default:
			*budget -= valueSize(fd, v)
		}
		return !found && *budget >= 0
	})
	return path, found
}

// anyTooDeep is the budget inspect leaves (or less) when the message nests
// too deep.
const anyTooDeep = math.MinInt / 2 // below any budget a message can spend, far from wrapping

// baseSize is the JSON of a message of type md with every field unset:
// each field's name and its zero value.
func (c *protoCodec) baseSize(md protoreflect.MessageDescriptor) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.base[md.FullName()]; ok {
		return n
	}
	n := 2
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		n += len(fd.Name()) + 4 // "name":,
		switch {
		case fd.IsList() || fd.IsMap():
			n += 2
		case fd.Message() != nil:
			n += 4 // null
		case fd.Enum() != nil && fd.Enum().Values().Len() > 0:
			n += len(fd.Enum().Values().Get(0).Name()) + 2
		default:
			n += 5 // false, "", 0
		}
	}
	c.base[md.FullName()] = n
	return n
}

// valueSize bounds the JSON of one scalar value: a string's escapes take
// up to six bytes per byte, base64 four per three; a number is its digits
// (a 64-bit one quoted), as protojson writes it. A bound far above the
// JSON would refuse real records: a packed bool or small number is one
// byte on the wire and at most five in JSON.
func valueSize(fd protoreflect.FieldDescriptor, v protoreflect.Value) int {
	var digits [24]byte
	switch fd.Kind() {
	case protoreflect.StringKind:
		return 6*len(v.String()) + 2
	case protoreflect.BytesKind:
		return 4*len(v.Bytes())/3 + 6
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return len(ev.Name()) + 2
		}
		return len(strconv.AppendInt(digits[:0], int64(v.Enum()), 10))
	case protoreflect.BoolKind:
		return len("false")
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return len(strconv.AppendInt(digits[:0], v.Int(), 10))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return len(strconv.AppendUint(digits[:0], v.Uint(), 10))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return len(strconv.AppendInt(digits[:0], v.Int(), 10)) + 2
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return len(strconv.AppendUint(digits[:0], v.Uint(), 10)) + 2
	case protoreflect.FloatKind:
		return 16 // the shortest form of a float32, or "-Infinity"
	}
	return 24 // of a double: -1.2345678901234567e-308
}
