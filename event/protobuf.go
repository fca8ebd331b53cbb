package event

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
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

	mu       sync.Mutex
	messages map[string]protoreflect.MessageDescriptor // by the indexes' text
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
	return &protoCodec{file: files[0], messages: map[string]protoreflect.MessageDescriptor{}}, nil
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

func (c *protoCodec) toJSON(idx []int, payload []byte, maxJSON int) ([]byte, error) {
	md, err := c.message(idx)
	if err != nil {
		return nil, err
	}
	m := dynamicpb.NewMessage(md)
	if err := (proto.UnmarshalOptions{RecursionLimit: MaxNesting}).Unmarshal(payload, m); err != nil {
		if strings.Contains(err.Error(), "recursion") || strings.Contains(err.Error(), "nesting") {
			return nil, decodeErr(ReasonNestingTooDeep, "the message nests deeper than %d levels", MaxNesting)
		}
		return nil, decodeErr(ReasonSchemaMismatch, "the payload is not a %s message: %v", md.FullName(), err)
	}
	if path, ok := unknownFields(m.ProtoReflect()); ok {
		return nil, decodeErr(ReasonSchemaMismatch, "the payload has fields its schema (%s) does not define, at %s: not a message of this schema", md.FullName(), path)
	}
	js, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return nil, decodeErr(ReasonSchemaMismatch, "the %s message has no JSON form: %v", md.FullName(), err)
	}
	if len(js) > maxJSON {
		return nil, decodeErr(ReasonTooLarge, "the payload decodes to %d bytes of JSON, more than %d", len(js), maxJSON)
	}
	return js, nil
}

// unknownFields reports where m, or a message in it, holds fields its
// descriptor does not define. The writer's schema is in the record, so a
// writer never has fields its reader lacks: unknown fields are bytes that
// only happened to parse.
func unknownFields(m protoreflect.Message) (string, bool) {
	if len(m.GetUnknown()) > 0 {
		return string(m.Descriptor().FullName()), true
	}
	var path string
	var found bool
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				path, found = unknownFields(mv.Message())
				return !found
			})
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len() && !found; i++ {
				path, found = unknownFields(l.Get(i).Message())
			}
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			path, found = unknownFields(v.Message())
		}
		return !found
	})
	return path, found
}
