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
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"
)

// A registry schema is compiled twice: first in a child process of this
// very binary, under limits on its CPU time and memory that the kernel
// enforces, and then, once the child has finished within them, here.
//
// The compilers (santhosh-tekuri/jsonschema, hamba/avro, protocompile)
// are libraries whose cost in a schema's shape nothing they expose
// bounds, and a goroutine cannot be stopped mid-compile. The checks made
// before compiling (jsonschema_limits.go) refuse the shapes known to be
// costly, with a reason that names them; the child bounds every other: a
// schema whose compile would take more than the limits is refused
// (unusable_schema) having cost the worker one child's CPU time and
// memory, and a schema that passes costs the worker what it cost the
// child. A compiler that panics or crashes on a schema fails in the child
// too, and the schema is refused instead of the worker dying.
//
// The child is the running executable (os.Executable) started with
// schemaCompileChildEnv set: this package's init compiles the schema it
// is sent on stdin and exits, before anything else of the program runs.
// So the stock binary, a team's own build and a test binary all carry it.
// Where no child can be started (no executable to run, a platform without
// resource limits), the schema is compiled here alone, bounded by the
// checks before compiling only.

// schemaCompileChildEnv marks a process as a schema compile child.
const schemaCompileChildEnv = "EFFECTIVELY_SCHEMA_COMPILE_CHILD"

// compileLimits bound one schema's compile in the child. The costliest
// schemas the checks before compiling admit take a third of a second of
// CPU and 30 MiB in all (TestSchemaCompileChildMeasuresTheLargestSchemas
// prints them): the limits leave a real schema 15 times that, and bound
// what a registered schema can cost the worker to about twice them (the
// child's, then the same compile's here).
type compileLimits struct {
	CPU    time.Duration // CPU time, all threads (whole seconds: RLIMIT_CPU)
	Memory int64         // bytes of writable memory the child maps beyond what it had at start (RLIMIT_DATA)
	Wall   time.Duration // the child is killed past this, even if starved of CPU
}

var defaultCompileLimits = compileLimits{CPU: 5 * time.Second, Memory: 512 << 20, Wall: time.Minute}

// compileSlots are the schema compiles that may run at once in the
// worker (each in a child, then in the process): a burst of new schema
// IDs on many partitions compiles one at a time instead of all at once.
var compileSlots = make(chan struct{}, 1)

// compileRequest is what the parent sends a child.
type compileRequest struct {
	Format string        `json:"format"`
	ID     int           `json:"id"`
	Text   string        `json:"text"`
	Refs   []compileRef  `json:"refs"`
	Limits compileLimits `json:"limits"`
}

type compileRef struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// childCompiles counts the compiles children finished (for tests).
var childCompiles atomic.Int64

// compileBounded compiles a registry schema: in a child under limits, then
// here.
func compileBounded(ctx context.Context, format string, id int, text string, refs []reference, limits compileLimits) (*registrySchema, error) {
	select {
	case compileSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-compileSlots }()
	if err := compileInChild(ctx, format, id, text, refs, limits); err != nil {
		return nil, err
	}
	return compileSchema(ctx, format, id, text, refs)
}

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

// errNoChild: no child could be started; the schema is compiled here only.
var errNoChild = errors.New("no schema compile child")

// compileInChild compiles the schema in a child process under limits. It
// returns nil once the child finished (whether the schema compiled or not:
// compiling it here says which, and why), the context's error if ctx ended
// first, and otherwise an error that says which limit the schema's compile
// went past.
func compileInChild(ctx context.Context, format string, id int, text string, refs []reference, limits compileLimits) error {
	_, err := runCompileChild(ctx, format, id, text, refs, limits)
	if errors.Is(err, errNoChild) {
		return nil
	}
	return err
}

// childUsage is what a child used: its CPU time and its peak resident
// memory.
type childUsage struct {
	CPU    time.Duration
	MaxRSS int64
}

func runCompileChild(ctx context.Context, format string, id int, text string, refs []reference, limits compileLimits) (childUsage, error) {
	if !canLimitChild {
		return childUsage{}, errNoChild
	}
	exe, err := os.Executable()
	if err != nil {
		return childUsage{}, errNoChild
	}
	req := compileRequest{Format: format, ID: id, Text: text, Limits: limits, Refs: make([]compileRef, len(refs))}
	for i, r := range refs {
		req.Refs[i] = compileRef{Name: r.name, Text: r.text}
	}
	in, err := json.Marshal(req)
	if err != nil {
		return childUsage{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, limits.Wall)
	defer cancel()
	cmd := exec.CommandContext(wctx, exe)
	// Only the marker: the child needs nothing of the worker's
	// environment (its credentials least of all), and one thread's worth
	// of CPU keeps the worker's other thread free.
	cmd.Env = []string{schemaCompileChildEnv + "=1", "GOMAXPROCS=1"}
	cmd.Stdin = bytes.NewReader(in)
	var stderr tailBuffer
	cmd.Stdout = io.Discard
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		if ctx.Err() != nil {
			return childUsage{}, ctx.Err()
		}
		return childUsage{}, errNoChild
	}
	err = cmd.Wait()
	used := childUsage{CPU: cpuTime(cmd.ProcessState), MaxRSS: maxRSS(cmd.ProcessState)}
	switch {
	case err == nil:
		childCompiles.Add(1)
		return used, nil
	case ctx.Err() != nil:
		return used, ctx.Err()
	case wctx.Err() != nil:
		return used, fmt.Errorf("compiling it took longer than %s (effectively compiles each schema first in a child process, within %s of CPU time, %s of memory and %s)", limits.Wall, limits.CPU, bytesText(limits.Memory), limits.Wall)
	}
	out := stderr.String()
	what := "failed"
	switch {
	case killedForCPU(cmd.ProcessState) && used.CPU >= limits.CPU/2: // rusage counts less than the limit does
		what = fmt.Sprintf("took more than %s of CPU time", limits.CPU)
	case strings.Contains(out, "out of memory") || strings.Contains(out, "cannot allocate memory"):
		what = fmt.Sprintf("needed more than %s of memory", bytesText(limits.Memory))
	default:
		if line := firstLineWith(out, "panic:", "fatal error:"); line != "" {
			what = "failed: " + Excerpt(line)
		} else {
			what = fmt.Sprintf("failed (%s after %s)", cmd.ProcessState, time.Since(start).Round(time.Millisecond))
		}
	}
	return used, fmt.Errorf("compiling it %s (effectively compiles each schema first in a child process, within %s of CPU time, %s of memory and %s)", what, limits.CPU, bytesText(limits.Memory), limits.Wall)
}

// The child: init runs before any other package's that imports this one,
// and before main.
func init() {
	if os.Getenv(schemaCompileChildEnv) != "" {
		os.Exit(compileChild(os.Stdin))
	}
}

// compileChild compiles the schema sent on in under the request's limits.
// It exits 0 when the compile ended, whatever its outcome.
func compileChild(in io.Reader) int {
	b, err := io.ReadAll(in)
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
	if err := limitSelf(req.Limits); err != nil {
		fmt.Fprintln(os.Stderr, "schema compile child: setting its limits:", err)
		return 3
	}
	// Garbage is collected before the memory limit is reached: the limit
	// is on what the compile holds, not on what it dropped.
	debug.SetMemoryLimit(req.Limits.Memory * 3 / 4)
	refs := make([]reference, len(req.Refs))
	for i, r := range req.Refs {
		refs[i] = reference{name: r.Name, text: r.Text}
	}
	_, _ = compileSchema(context.Background(), req.Format, req.ID, req.Text, refs)
	return 0
}

// tailBuffer keeps the first 64 KiB written to it: a child's panic or
// fatal error and the start of its trace.
type tailBuffer struct{ bytes.Buffer }

func (t *tailBuffer) Write(p []byte) (int, error) {
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

func bytesText(n int64) string {
	return fmt.Sprintf("%d MiB", n>>20)
}

// cpuTime is the CPU time a finished process used.
func cpuTime(ps *os.ProcessState) time.Duration {
	if ps == nil {
		return 0
	}
	return ps.UserTime() + ps.SystemTime()
}
