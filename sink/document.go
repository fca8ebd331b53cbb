package sink

import (
	"sync"

	"github.com/valyala/fastjson"
)

// document is an event's data, parsed once for every pointer of its sinks.
// fastjson parses without building a tree of Go values, and its parsers
// are reused across events (a pool: the partition workers run
// concurrently).
type document struct {
	p    *fastjson.Parser
	root *fastjson.Value
}

var parsers sync.Pool

func parse(data []byte) (*document, error) {
	p, _ := parsers.Get().(*fastjson.Parser)
	if p == nil {
		p = &fastjson.Parser{}
	}
	root, err := p.ParseBytes(data)
	if err != nil {
		parsers.Put(p)
		return nil, err
	}
	return &document{p: p, root: root}, nil
}

// get returns the value at the pointer's reference tokens; nil when absent.
// An array element is addressed by its index, as in RFC 6901.
func (d *document) get(tokens []string) *fastjson.Value {
	return d.root.Get(tokens...)
}

// release returns the parser for reuse; the values read from it must not
// be used afterwards (read copies them).
func (d *document) release() {
	d.root = nil
	parsers.Put(d.p)
}
