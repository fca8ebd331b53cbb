package event

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"time"
)

// A registry schema is compiled twice: first in a child process of this
// very binary, under limits on its CPU time and memory that the kernel
// enforces, and then, once the child has compiled it within them, here.
//
// The compilers (santhosh-tekuri/jsonschema, hamba/avro, protocompile)
// are libraries whose cost in a schema's shape nothing they expose
// bounds, and a goroutine cannot be stopped mid-compile. The checks made
// before compiling (jsonschema_limits.go, and maxSchemaBytes for every
// format) refuse the shapes known to be costly, with a reason that names
// them; the child bounds every other. What decides:
//
//   - the child compiled the schema within the limits, holding at most
//     maxSchemaHeld, and said so on stdout: it is compiled here, at the
//     cost it had in the child;
//   - the child found it invalid (it sends the compiler's error), went
//     past its CPU time or its memory, the compiler panicked, or the
//     compiled schema would hold more than maxSchemaHeld: the schema's
//     fault. The record is unusable_schema, and the schema ID is refused
//     for refusalForGood (a schema never changes under its ID), never
//     compiled in the worker;
//   - anything else (the child could not start, was killed from outside,
//     as by the OOM killer, ran out of wall time on a starved machine,
//     or exited without an answer): the environment's. The record is
//     retried, like one whose registry does not answer, and nothing is
//     dead-lettered.
//
// The child is the running executable (/proc/self/exe: the file the
// worker was started from, even if it has since been replaced or deleted)
// started with schemaCompileChildEnv set to its limits: this package's
// init sets them, reads the schema from stdin, compiles it and exits. So
// the stock binary, a team's own build and a test binary all carry it.
// (Packages whose import paths sort before this one's are initialised
// first, in the child as in the worker: it gets the worker's environment,
// so their inits behave alike.) On other systems than Linux the schema is
// compiled in the worker, bounded by the checks before compiling only.

// schemaCompileChildEnv marks a process as a schema compile child. Its
// value is the child's limits: "<CPU seconds>,<memory bytes>".
const schemaCompileChildEnv = "EFFECTIVELY_SCHEMA_COMPILE_CHILD"

// childAnswer starts the line a child writes once it has compiled.
const childAnswer = "effectively-schema-compiled"

// compileLimits bound one schema's compile in the child. The costliest
// schemas the checks before compiling admit and that hold at most
// maxSchemaHeld take a quarter of a second of CPU and 55 MiB at their
// peak (TestSchemaCompileChildMeasuresTheLargestSchemas prints them).
// The memory limit leaves room in the Helm chart's pod (384 MiB) for the
// worker beside the child, and then for the same compile in the worker.
type compileLimits struct {
	CPU    time.Duration // CPU time, all threads (whole seconds: RLIMIT_CPU)
	Memory int64         // bytes of writable memory beyond what the child had when it set its limits (RLIMIT_DATA)
	Wall   time.Duration // the child is killed past this, even if starved of CPU
}

var defaultCompileLimits = compileLimits{CPU: 2 * time.Second, Memory: 128 << 20, Wall: 2 * time.Minute}

// compileSlots are the schema compiles that may run at once in the
// worker (each in a child, then in the process): a burst of new schema
// IDs on many partitions compiles one at a time instead of all at once.
var compileSlots = make(chan struct{}, 1)

// childCompiles counts the compiles children finished (for tests).
var childCompiles atomic.Int64

// compileBounded compiles a registry schema: in a child under limits, then
// here.
func compileBounded(ctx context.Context, format string, id int, text string, refs []reference, limits compileLimits) (*registrySchema, error) {
	if err := checkSchemaSize(text, refs); err != nil {
		return nil, err
	}
	select {
	case compileSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-compileSlots }()
	used, err := runCompileChild(ctx, format, id, text, refs, limits)
	if err != nil && !errors.Is(err, errNoChild) {
		return nil, err
	}
	if used.Heap > maxSchemaHeld {
		// Never compiled here: the child measured what it would hold.
		return nil, fmt.Errorf("compiled, it holds %s; effectively keeps at most %s of one schema", bytesText(used.Heap), bytesText(maxSchemaHeld))
	}
	s, err := compileSchema(ctx, format, id, text, refs)
	if err != nil {
		return nil, err
	}
	s.cost = used.Heap
	if s.cost <= 0 {
		// No child measured it: an estimate from above (a schema of
		// small subschemas holds a few hundred times its text).
		s.cost = min(64<<10+400*int64(len(text)+referencesSize(refs)), maxSchemaHeld)
	}
	return s, nil
}

// checkSchemaSize refuses a schema whose text and references' add up to
// more than maxSchemaBytes.
func checkSchemaSize(text string, refs []reference) error {
	if size := len(text) + referencesSize(refs); size > maxSchemaBytes {
		return fmt.Errorf("the schema and its references are %s bytes; effectively compiles at most %s", english.Sprint(size), english.Sprint(maxSchemaBytes))
	}
	return nil
}

// referencesSize is the bytes of refs' texts and names.
func referencesSize(refs []reference) int {
	n := 0
	for _, r := range refs {
		n += len(r.name) + len(r.text)
	}
	return n
}

// maxChildRequest bounds the request a child reads: a schema and its
// references of maxSchemaBytes, each byte escaped in JSON as six at most.
const maxChildRequest = 6*maxSchemaBytes + 64<<10

// compileSchema parses a registry schema of format with its references.
func compileSchema(ctx context.Context, format string, id int, text string, refs []reference) (*registrySchema, error) {
	s := &registrySchema{id: id, format: format}
	var err error
	switch format {
	case FormatAvro:
		s.avro, err = newAvroCodec(text, refs)
	case FormatProtobuf:
		s.proto, err = newProtoCodec(ctx, id, text, refs)
	default:
		s.json, err = newJSONSchemaCodec(id, text, refs)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// errNoChild: this system's limits are not relied on; the schema is
// compiled here only.
var errNoChild = errors.New("no schema compile child on this system")

// childUsage is what a child used: its CPU time, its peak resident memory,
// and the heap the compiled schema held (its cost in the worker's cache;
// 0 when the compile failed).
type childUsage struct {
	CPU    time.Duration
	MaxRSS int64
	Heap   int64
}

// runCompileChild compiles the schema in a child process under limits. It
// returns nil once the child compiled it; errNoChild on a system without
// the child; the context's error if ctx ended first; an error wrapping
// ErrSchemaRegistryUnavailable when the child failed for the
// environment's reasons; and otherwise the schema's fault: the compiler's
// error, or which limit the compile went past.
func runCompileChild(ctx context.Context, format string, id int, text string, refs []reference, limits compileLimits) (childUsage, error) {
	if !canLimitChild {
		return childUsage{}, errNoChild
	}
	req := compileRequest{Format: format, ID: id, Text: text, Refs: make([]compileRef, len(refs))}
	for i, r := range refs {
		req.Refs[i] = compileRef{Name: r.name, Text: r.text}
	}
	in, err := json.Marshal(req)
	if err != nil {
		return childUsage{}, err
	}
	if len(in) > maxChildRequest {
		return childUsage{}, fmt.Errorf("the schema and its references are %s bytes written as JSON; effectively compiles at most %s", english.Sprint(len(in)), english.Sprint(maxChildRequest))
	}
	wctx, cancel := context.WithTimeout(ctx, limits.Wall)
	defer cancel()
	cmd := exec.CommandContext(wctx, selfExe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%d", schemaCompileChildEnv, int64(max(1, limits.CPU.Seconds())), limits.Memory), "GOMAXPROCS=1")
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr headBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second // a descendant holding its pipes does not hold the slot
	limitsText := fmt.Sprintf("within %s of CPU time, %s of memory and %s", limits.CPU, bytesText(limits.Memory), limits.Wall)
	environment := func(what string, args ...any) error {
		return unavailable(fmt.Sprintf("compiling schema %d", id), fmt.Errorf("the schema compile child (this executable, run with %s set) %s; the record is retried", schemaCompileChildEnv, fmt.Sprintf(what, args...)))
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		if ctx.Err() != nil {
			return childUsage{}, ctx.Err()
		}
		return childUsage{}, environment("could not start: %v", err)
	}
	err = cmd.Wait()
	used := childUsage{CPU: cpuTime(cmd.ProcessState)}
	out, errOut := stdout.String(), stderr.String()
	if err == nil {
		if rest, ok := strings.CutPrefix(out, childAnswer); ok {
			childCompiles.Add(1)
			line, compileErr, _ := strings.Cut(rest, "\n")
			_, _ = fmt.Sscan(line, &used.Heap, &used.MaxRSS)
			if used.Heap <= 0 {
				if compileErr == "" {
					compileErr = "it does not compile"
				}
				return used, errors.New(compileErr)
			}
			return used, nil
		}
		return used, environment("exited without compiling (an init of another package may have ended it first): %s", Excerpt(firstLine(errOut+out)))
	}
	switch {
	case ctx.Err() != nil:
		return used, ctx.Err()
	case wctx.Err() != nil:
		return used, environment("did not finish in %s (%s of CPU time: the machine is starved)", limits.Wall, used.CPU.Round(time.Millisecond))
	case killedForCPU(cmd.ProcessState) && used.CPU >= limits.CPU/2: // rusage counts less than the limit does
		return used, fmt.Errorf("compiling it took more than %s of CPU time (effectively compiles each schema first in a child process, %s)", limits.CPU, limitsText)
	case outOfMemory(errOut):
		return used, fmt.Errorf("compiling it needed more than %s of memory (effectively compiles each schema first in a child process, %s)", bytesText(limits.Memory), limitsText)
	case strings.HasPrefix(errOut, "panic:") || strings.Contains(errOut, "\npanic:") || strings.Contains(errOut, "fatal error: stack overflow"):
		return used, fmt.Errorf("its compiler crashed on it in a child process: %s", Excerpt(firstLineWith(errOut, "panic:", "fatal error:")))
	default:
		return used, environment("ended with %s after %s: %s", cmd.ProcessState, time.Since(start).Round(time.Millisecond), Excerpt(firstLine(errOut)))
	}
}

// outOfMemory reports whether a child's stderr says it ran out of memory:
// an allocation failed, or a thread could not be made (its stack is
// memory RLIMIT_DATA counts too) after the child said its memory was near
// the limit. A thread that cannot be made otherwise is the machine's
// process or thread limit (RLIMIT_NPROC, the pod's pids.max): the
// environment's.
func outOfMemory(stderr string) bool {
	if strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory") {
		return true
	}
	if !strings.Contains(stderr, childMemoryHigh) {
		return false
	}
	for _, s := range []string{"pthread_create failed", "failed to create new OS thread", "fatal error: newosproc"} {
		if strings.Contains(stderr, s) {
			return true
		}
	}
	return false
}

// childMemoryHigh is what a child writes on stderr once the memory it
// maps is past 80% of its limit (watchMemory).
const childMemoryHigh = "effectively-schema-compile: memory near the limit"

// watchMemory writes childMemoryHigh once the runtime maps more than 80%
// of limit beyond what it maps now.
func watchMemory(limit int64) {
	total := func() int64 {
		m := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
		metrics.Read(m)
		return int64(m[0].Value.Uint64())
	}
	base := total()
	go func() {
		for total()-base < limit/10*8 {
			time.Sleep(5 * time.Millisecond)
		}
		fmt.Fprintln(os.Stderr, childMemoryHigh)
	}()
}

// selfExe is the running executable, whatever has since happened to the
// file it was started from.
const selfExe = "/proc/self/exe"

// compileRequest is what the parent sends a child on stdin.
type compileRequest struct {
	Format string       `json:"format"`
	ID     int          `json:"id"`
	Text   string       `json:"text"`
	Refs   []compileRef `json:"refs"`
}

type compileRef struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// The child: this package's init, run before main (and before the inits
// of packages that import this one).
func init() {
	if v, ok := os.LookupEnv(schemaCompileChildEnv); ok {
		os.Exit(compileChild(v, os.Stdin))
	}
}

// compileChild sets the limits in spec, then compiles the schema sent on
// in. It answers on stdout when the compile ended, whatever its outcome,
// and exits 0.
func compileChild(spec string, in io.Reader) int {
	var limits compileLimits
	var secs int64
	if _, err := fmt.Sscanf(spec, "%d,%d", &secs, &limits.Memory); err != nil || secs < 1 || limits.Memory < 1 {
		fmt.Fprintf(os.Stderr, "schema compile child: %s=%q is not <CPU seconds>,<memory bytes>\n", schemaCompileChildEnv, spec)
		return 3
	}
	limits.CPU = time.Duration(secs) * time.Second
	// The limits come first: the request is read within them.
	if err := limitSelf(limits); err != nil {
		fmt.Fprintln(os.Stderr, "schema compile child: setting its limits:", err)
		return 3
	}
	// Garbage is collected before the memory limit is reached: the limit
	// is on what the compile holds, not on what it dropped.
	debug.SetMemoryLimit(limits.Memory * 3 / 4)
	watchMemory(limits.Memory)
	b, err := io.ReadAll(io.LimitReader(in, maxChildRequest))
	if err != nil {
		fmt.Fprintln(os.Stderr, "schema compile child: reading the request:", err)
		return 3
	}
	var req compileRequest
	if err := json.Unmarshal(b, &req); err != nil {
		fmt.Fprintln(os.Stderr, "schema compile child: the request is not JSON:", err)
		return 3
	}
	b = nil
	refs := make([]reference, len(req.Refs))
	for i, r := range req.Refs {
		refs[i] = reference{name: r.Name, text: r.Text}
	}
	before := liveHeap()
	s, err := compileSchema(context.Background(), req.Format, req.ID, req.Text, refs)
	if err != nil {
		// The schema's own error, for the worker to report without
		// compiling it again.
		fmt.Println(childAnswer, 0, peakRSS())
		fmt.Print(err.Error())
		return 0
	}
	// What the compiled schema holds: the heap after a collection, less
	// the heap before (the request, the runtime's own).
	heap := max(liveHeap()-before, 1)
	runtime.KeepAlive(s)
	fmt.Println(childAnswer, heap, peakRSS())
	return 0
}

// liveHeap is the heap's live bytes after a full collection.
func liveHeap() int64 {
	runtime.GC()
	m := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(m)
	return int64(m[0].Value.Uint64())
}

// headBuffer keeps the first 64 KiB written to it: a child's answer, or
// its panic or fatal error and the start of its trace.
type headBuffer struct{ bytes.Buffer }

func (t *headBuffer) Write(p []byte) (int, error) {
	if room := 64<<10 - t.Len(); room > 0 {
		t.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func firstLineWith(s string, prefixes ...string) string {
	for line := range strings.Lines(s) {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				return strings.TrimSpace(line)
			}
		}
	}
	return ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

func bytesText(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// cpuTime is the CPU time a finished process used.
func cpuTime(ps *os.ProcessState) time.Duration {
	if ps == nil {
		return 0
	}
	return ps.UserTime() + ps.SystemTime()
}
