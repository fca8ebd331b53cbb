package test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// netLab is a toxiproxy server run in the test process: links (TCP proxies)
// between a client and a server that a test cuts, slows or poisons while
// traffic flows. No Docker, no HTTP API: the test drives the proxies
// directly.
type netLab struct {
	server *toxiproxy.ApiServer
}

// newNetLab starts a lab whose proxies all stop when the test ends.
func newNetLab(t *testing.T) *netLab {
	t.Helper()
	registerPGCommitAnswerToxic()
	l := &netLab{server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())}
	t.Cleanup(func() {
		if err := l.server.Collection.Clear(); err != nil {
			t.Errorf("net lab: stopping proxies: %v", err)
		}
	})
	return l
}

// link is one proxy of a lab: clients dial Addr, the proxy dials the
// upstream. Its methods serialise on the link and fail the test (with the
// *testing.T the link was made with) when toxiproxy refuses; called from
// a goroutine other than the test's, a failure ends only that goroutine,
// as require does.
type link struct {
	// Name is the proxy's name in the lab.
	Name string
	// Addr is the 127.0.0.1:port clients dial.
	Addr string

	t     *testing.T
	proxy *toxiproxy.Proxy
	// key names the link in pgCommitCounters (the custom toxic finds its
	// counter by it).
	key string

	mu     sync.Mutex
	toxics []string // names of the toxics in place
	seq    int      // makes toxic names unique
	isCut  bool

	commitsDropped atomic.Int64
}

// link proxies a free 127.0.0.1 port to upstream.
func (l *netLab) link(t *testing.T, name, upstream string) *link {
	t.Helper()
	return l.linkOn(t, name, "127.0.0.1:0", upstream)
}

// linkOn proxies listen (host:port) to upstream.
func (l *netLab) linkOn(t *testing.T, name, listen, upstream string) *link {
	t.Helper()
	p := toxiproxy.NewProxy(l.server, name, listen, upstream)
	if err := l.server.Collection.Add(p, true); err != nil {
		t.Fatalf("net lab: link %s (%s → %s): %v", name, listen, upstream, err)
	}
	k := &link{Name: name, Addr: p.Listen, t: t, proxy: p, key: fmt.Sprintf("%s@%p", name, l)}
	pgCommitCounters.Store(k.key, &k.commitsDropped)
	t.Cleanup(func() { pgCommitCounters.Delete(k.key) })
	return k
}

// cut is a full partition: every open connection is closed at once and
// new ones are refused (the proxy stops listening) until heal.
func (k *link) cut() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.proxy.Stop()
	k.isCut = true
}

// cutOneWay drops the data flowing in dir ("upstream": client to server,
// "downstream": server to client); the other direction flows.
func (k *link) cutOneWay(dir string) {
	k.t.Helper()
	if dir != "upstream" && dir != "downstream" {
		k.t.Fatalf("net lab: link %s: cutOneWay(%q): the direction is upstream or downstream", k.Name, dir)
	}
	k.add("timeout", dir, `{"timeout": 0}`)
}

// halfOpen makes the link a black hole both ways: bytes are accepted and
// never delivered nor answered; no RST, no FIN.
func (k *link) halfOpen() {
	k.t.Helper()
	k.add("timeout", "upstream", `{"timeout": 0}`)
	k.add("timeout", "downstream", `{"timeout": 0}`)
}

// latency delays both directions by ms ± jitterMs.
func (k *link) latency(ms, jitterMs int) {
	k.t.Helper()
	attrs := fmt.Sprintf(`{"latency": %d, "jitter": %d}`, ms, jitterMs)
	k.add("latency", "upstream", attrs)
	k.add("latency", "downstream", attrs)
}

// bandwidth limits both directions to kbPerSec KB/s.
func (k *link) bandwidth(kbPerSec int) {
	k.t.Helper()
	attrs := fmt.Sprintf(`{"rate": %d}`, kbPerSec)
	k.add("bandwidth", "upstream", attrs)
	k.add("bandwidth", "downstream", attrs)
}

// slicer cuts both directions into small pieces (about 64 bytes, 20 µs
// apart): every message a peer reads arrives in several reads.
func (k *link) slicer() {
	k.t.Helper()
	attrs := `{"average_size": 64, "size_variation": 32, "delay": 20}`
	k.add("slicer", "upstream", attrs)
	k.add("slicer", "downstream", attrs)
}

// dropAnswers lets requests reach the server and drops its answers: the
// first bytes the server sends on a connection close it. A connection
// opened after the call is reset (RST); one already open is closed with a
// FIN, because toxiproxy sets SO_LINGER 0 only when a connection starts.
func (k *link) dropAnswers() {
	k.t.Helper()
	k.add("reset_peer", "downstream", `{"timeout": 0}`)
}

// dropCommitAnswers drops PostgreSQL's answer to COMMIT (see
// pgCommitAnswerToxic): with hold false the client's connection is closed
// at once, its COMMIT unanswered; with hold true it stays open and silent
// until heal, which then closes it.
func (k *link) dropCommitAnswers(hold bool) {
	k.t.Helper()
	k.add(pgCommitAnswerType, "downstream", fmt.Sprintf(`{"link": %q, "hold": %t}`, k.key, hold))
}

// commitAnswersDropped is how many COMMIT answers the link has dropped.
func (k *link) commitAnswersDropped() int64 { return k.commitsDropped.Load() }

// heal removes every toxic and reopens a cut link. Toxics that drop data
// (timeout, dropCommitAnswers) close the connections they held when they
// are removed: the bytes they swallowed are gone, so those streams could
// not resume. Healing a healthy link does nothing.
func (k *link) heal() {
	k.t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, name := range k.toxics {
		if err := k.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
			k.t.Fatalf("net lab: link %s: removing toxic %s: %v", k.Name, name, err)
		}
	}
	k.toxics = nil
	if k.isCut {
		if err := k.proxy.Start(); err != nil {
			k.t.Fatalf("net lab: link %s: reopening %s: %v", k.Name, k.Addr, err)
		}
		k.isCut = false
	}
}

// add puts a toxic of type typ on the stream dir, named uniquely.
func (k *link) add(typ, dir, attrs string) {
	k.t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seq++
	name := fmt.Sprintf("%s_%s_%d", typ, dir, k.seq)
	body := fmt.Sprintf(`{"name": %q, "type": %q, "stream": %q, "toxicity": 1, "attributes": %s}`, name, typ, dir, attrs)
	if _, err := k.proxy.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		k.t.Fatalf("net lab: link %s: adding %s: %v", k.Name, body, err)
	}
	k.toxics = append(k.toxics, name)
}

const pgCommitAnswerType = "pg_commit_answer"

// pgCommitComplete is PostgreSQL's CommandComplete message for a COMMIT:
// 'C', its length (int32, big-endian, counting itself) and the tag.
var pgCommitComplete = []byte{'C', 0, 0, 0, 11, 'C', 'O', 'M', 'M', 'I', 'T', 0}

// pgCommitCounters maps a link's key to its counter of dropped COMMIT
// answers. toxiproxy builds each toxic from JSON into a fresh value, so the
// toxic can only name its link (the "link" attribute), not point at it.
var pgCommitCounters sync.Map // string → *atomic.Int64

var registerPGCommitAnswer sync.Once

func registerPGCommitAnswerToxic() {
	registerPGCommitAnswer.Do(func() { toxics.Register(pgCommitAnswerType, new(pgCommitAnswerToxic)) })
}

// pgCommitAnswerToxic runs on a PostgreSQL link's downstream (server to
// client). It forwards the server's bytes unchanged until the
// CommandComplete of a COMMIT, then drops that message and everything
// after it: the transaction is committed on the server while the client
// never learns it. Hold false closes the client's connection at once; hold
// true keeps it open and silent until the toxic is removed (which closes
// it) or the server ends it.
type pgCommitAnswerToxic struct {
	// Link is the key of the link whose counter counts the drops.
	Link string `json:"link"`
	// Hold keeps the connection open after the drop.
	Hold bool `json:"hold"`
}

// pgCommitAnswerState is a connection's state. It lives on the stub, not
// in Pipe's locals, because toxiproxy interrupts and restarts Pipe whenever
// another toxic is added after it or removed before it.
type pgCommitAnswerState struct {
	// tail is the longest end of the stream so far that could begin a
	// CommandComplete split across chunks (a proper prefix of
	// pgCommitComplete): a match can start nowhere earlier.
	tail []byte
	// held is how many of tail's last bytes are not forwarded yet: held
	// back so that none of the message reaches the client, until the next
	// chunk shows whether it follows or pgHoldBack passes.
	held int
	// dropping: the COMMIT answer was seen; nothing passes any more.
	dropping bool
}

// pgHoldBack is how long the end of a chunk that could begin the message
// waits for the next chunk before it is forwarded anyway. PostgreSQL sends
// CommandComplete and ReadyForQuery in one write and always ends what it
// sends before waiting with ReadyForQuery, so a split is the proxy's doing
// and the rest follows at once; a split found later still drops the rest
// of the message (the client then sees its first bytes and the end).
const pgHoldBack = 100 * time.Millisecond

func (*pgCommitAnswerToxic) NewState() any { return new(pgCommitAnswerState) }

func (x *pgCommitAnswerToxic) Pipe(stub *toxics.ToxicStub) {
	st := stub.State.(*pgCommitAnswerState)
	var flush <-chan time.Time
	release := func() {
		if st.held > 0 && !st.dropping {
			stub.Output <- &stream.StreamChunk{Data: bytes.Clone(st.tail[len(st.tail)-st.held:]), Timestamp: time.Now()}
		}
		st.held = 0
	}
	for {
		select {
		case <-stub.Interrupt:
			release()
			return
		case <-flush:
			flush = nil
			release()
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			if st.dropping {
				continue
			}
			data := append(bytes.Clone(st.tail), c.Data...)
			sent := len(st.tail) - st.held // data[:sent] has reached the client
			if i := bytes.Index(data, pgCommitComplete); i >= 0 {
				if i > sent {
					stub.Output <- &stream.StreamChunk{Data: data[sent:i], Timestamp: c.Timestamp}
				}
				st.dropping, st.tail, st.held = true, nil, 0
				if n, ok := pgCommitCounters.Load(x.Link); ok {
					n.(*atomic.Int64).Add(1)
				}
				if !x.Hold {
					stub.Close()
					drain(stub)
					return
				}
				continue
			}
			keep := len(data) - pgPrefixSuffix(data) // data[keep:] is the new tail
			if keep > sent {
				stub.Output <- &stream.StreamChunk{Data: data[sent:keep], Timestamp: c.Timestamp}
			}
			st.tail = bytes.Clone(data[keep:])
			st.held = len(data) - max(keep, sent)
			if st.held > 0 && flush == nil {
				flush = time.After(pgHoldBack)
			}
		}
	}
}

// Cleanup closes a connection whose COMMIT answer was dropped when the
// toxic is removed: the stream lost bytes and cannot resume. Connections
// that saw no COMMIT carry on.
func (*pgCommitAnswerToxic) Cleanup(stub *toxics.ToxicStub) {
	if st, ok := stub.State.(*pgCommitAnswerState); ok && st.dropping {
		stub.Close()
	}
}

// drain reads a closed stub's input until the server's side ends, so the
// toxics before it (which block on their sends) end with the connection.
func drain(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				return
			}
		}
	}
}

// pgPrefixSuffix is the length of the longest end of data that is a proper
// start of pgCommitComplete.
func pgPrefixSuffix(data []byte) int {
	for n := min(len(data), len(pgCommitComplete)-1); n > 0; n-- {
		if bytes.HasPrefix(pgCommitComplete, data[len(data)-n:]) {
			return n
		}
	}
	return 0
}
