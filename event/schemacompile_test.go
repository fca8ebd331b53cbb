package event

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
)

func requireChildren(t *testing.T) {
	t.Helper()
	if !canLimitChild {
		t.Skip("schemas are compiled in a bounded child on Linux only")
	}
}

// A schema read through the registry is compiled in a child first, for
// each of the three formats, and the decoder then uses it as before.
func TestRegistrySchemasAreCompiledInABoundedChild(t *testing.T) {
	requireChildren(t)
	for _, c := range []struct {
		format string
		schema sr.Schema
	}{
		{FormatJSONSchema, sr.Schema{Type: sr.TypeJSON, Schema: `{"type":"object","required":["id"],"properties":{"id":{"type":"string"}}}`}},
		{FormatAvro, sr.Schema{Type: sr.TypeAvro, Schema: `{"type":"record","name":"r","fields":[{"name":"id","type":"string"}]}`}},
		{FormatProtobuf, sr.Schema{Type: sr.TypeProtobuf, Schema: `syntax = "proto3"; message M { string id = 1; }`}},
	} {
		reg := newMemRegistry()
		reg.add(7, "s", 1, c.schema)
		rd := newRegistryDecoder(c.format, reg)
		before := childCompiles.Load()
		s, err := rd.schema(t.Context(), 7, false)
		require.NoError(t, err, c.format)
		require.Equal(t, c.format, s.format)
		require.Equal(t, before+1, childCompiles.Load(), "%s: one child compiled it", c.format)
		require.Positive(t, s.cost, "%s: the child measured what it holds", c.format)
		require.Less(t, s.cost, int64(4<<20), c.format)
		t.Logf("%s: the compiled schema holds %d bytes", c.format, s.cost)
	}
}

// The process keeps at most maxCachedSchemaBytes of compiled schemas,
// the least recently used dropped first whichever topic's decoder holds
// it; a dropped schema is fetched and compiled again when a record names
// it.
func TestCompiledSchemasAreKeptWithinTheirBudget(t *testing.T) {
	reg := newMemRegistry()
	for id := 1; id <= 3; id++ {
		reg.add(id, "s", id, sr.Schema{Type: sr.TypeJSON, Schema: fmt.Sprintf(`{"type":"object","maxProperties":%d}`, id)})
	}
	a, b := newRegistryDecoder(FormatJSONSchema, reg), newRegistryDecoder(FormatJSONSchema, reg)
	heavy := func(id int) *registrySchema {
		return &registrySchema{id: id, format: FormatJSONSchema, cost: maxSchemaHeld}
	}
	for i := 1; i <= maxCachedSchemaBytes/maxSchemaHeld; i++ {
		keepSchema(a.serial, heavy(i)) // the cache is full of a's
	}
	_, err := a.schema(t.Context(), 1, false) // 1 is now the most recently used
	require.NoError(t, err)
	keepSchema(b.serial, heavy(3)) // another topic's: a's 2 goes
	require.NotNil(t, cachedSchema(a.serial, 1))
	require.Nil(t, cachedSchema(a.serial, 2), "the least recently used is dropped")
	require.NotNil(t, cachedSchema(b.serial, 3))
	schemaCache.mu.Lock()
	cost := schemaCache.cost
	schemaCache.mu.Unlock()
	require.LessOrEqual(t, cost, int64(maxCachedSchemaBytes))

	s, err := a.schema(t.Context(), 2, false)
	require.NoError(t, err, "a dropped schema is compiled again")
	require.Equal(t, 2, s.id)
	require.NotNil(t, s.json)
}

// A schema whose compile goes past the child's memory is refused as
// unusable_schema, for good (no child compiles it again), and the worker
// never compiles it itself. A child that runs out of wall time (a starved
// machine) is the environment's: the record is retried, nothing refused.
// (The limits are lowered here so that a schema the checks before
// compiling admit goes past them.)
func TestSchemaCompilePastTheChildsLimitsIsRefused(t *testing.T) {
	requireChildren(t)
	// 4,000 properties with a pattern each: tens of megabytes compiled.
	wide := `{"type":"object","properties":{` + list(4000, func(i int) string {
		return fmt.Sprintf(`"field_%d":{"type":"string","pattern":"^[a-z]{1,%d}$","minLength":%d}`, i, i%50+1, i%7)
	}) + `}}`
	usage, err := runCompileChild(t.Context(), FormatJSONSchema, 1, wide, nil, defaultCompileLimits)
	require.NoError(t, err, "within the default limits")
	t.Logf("the wide schema (%d bytes) took %v of CPU and %d MiB in the child", len(wide), usage.CPU.Round(time.Millisecond), usage.MaxRSS>>20)

	decoder := func(format string, schema sr.Schema, limits compileLimits) *registryDecoder {
		reg := newMemRegistry()
		reg.add(9, "s", 1, schema)
		rd := newRegistryDecoder(format, reg)
		rd.limits = limits
		return rd
	}
	if !raceEnabled { // the race runtime maps its heap ahead, before the child limits itself
		// 20,000 messages each holding the next: 32 MiB compiled.
		var chain strings.Builder
		chain.WriteString("syntax = \"proto3\";\n")
		for i := range 20_000 {
			fmt.Fprintf(&chain, "message M%d { M%d a = 1; string b = 2; }\n", i, (i+1)%20_000)
		}
		rd := decoder(FormatProtobuf, sr.Schema{Type: sr.TypeProtobuf, Schema: chain.String()}, compileLimits{CPU: 5 * time.Second, Memory: 16 << 20, Wall: time.Minute})
		_, err := rd.schema(t.Context(), 9, false)
		var de *DecodeError
		require.ErrorAs(t, err, &de)
		require.Equal(t, ReasonUnusableSchema, de.Reason)
		require.ErrorContains(t, err, "schema 9 cannot be used: compiling it needed more than 16 MiB of memory")
		require.Greater(t, rd.forGood[9].until.Sub(time.Now()), time.Hour, "refused for good")
		t.Logf("memory: %v", err)
		children := childCompiles.Load()
		rd.now = func() time.Time { return time.Now().Add(2 * time.Minute) }
		_, err2 := rd.schema(t.Context(), 9, false)
		require.Equal(t, err, err2, "the same refusal")
		require.Equal(t, children, childCompiles.Load(), "no child compiled it again")

		// Within the limits, but it would hold 32 MiB compiled: refused
		// as the child measured it, never compiled in the worker, even
		// with the short refusals full (a producer's unknown IDs).
		rd = decoder(FormatProtobuf, sr.Schema{Type: sr.TypeProtobuf, Schema: chain.String()}, compileLimits{CPU: 5 * time.Second, Memory: 512 << 20, Wall: time.Minute})
		for id := range maxRefusals {
			rd.refused[1_000_000+id] = refusal{err: decodeErr(ReasonUnknownSchema, "unknown"), until: time.Now().Add(time.Minute)}
		}
		_, err = rd.schema(t.Context(), 9, false)
		require.ErrorContains(t, err, "schema 9 cannot be used: compiled, it holds 32.")
		require.ErrorContains(t, err, "effectively keeps at most 8 MiB of one schema")
		require.Contains(t, rd.forGood, 9, "remembered though the short refusals are full")
		t.Logf("held: %v", err)
	}

	rd := decoder(FormatJSONSchema, sr.Schema{Type: sr.TypeJSON, Schema: wide}, compileLimits{CPU: 5 * time.Second, Memory: 192 << 20, Wall: time.Millisecond})
	_, err = rd.schema(t.Context(), 9, false)
	require.ErrorIs(t, err, ErrSchemaRegistryUnavailable)
	var de *DecodeError
	require.False(t, errors.As(err, &de), "not a dead letter: %v", err)
	require.ErrorContains(t, err, "did not finish in 1ms")
	require.Empty(t, rd.refused)
	t.Logf("wall time: %v", err)
}

// The kernel stops a child at its CPU time, and the parent names it: no
// schema the checks before compiling admit takes that long, so the test
// runs itself as a child that sets the limits and spins.
func TestSchemaCompileChildIsStoppedAtItsCPUTime(t *testing.T) {
	requireChildren(t)
	if os.Getenv("EFFECTIVELY_TEST_SPIN") != "" {
		require.NoError(t, limitSelf(compileLimits{CPU: time.Second, Memory: 64 << 20}))
		for {
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSchemaCompileChildIsStoppedAtItsCPUTime$")
	cmd.Env = append(os.Environ(), "EFFECTIVELY_TEST_SPIN=1")
	start := time.Now()
	require.Error(t, cmd.Run())
	require.True(t, killedForCPU(cmd.ProcessState), "killed for its CPU time: %v", cmd.ProcessState)
	require.GreaterOrEqual(t, cpuTime(cmd.ProcessState), 500*time.Millisecond, "rusage counts up to an eighth less than the limit")
	t.Logf("the spinning child was killed after %v of CPU (%v of wall time)", cpuTime(cmd.ProcessState).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// What the child costs: a small schema's compile in a child against the
// same compile in the process (medians of 15), and the largest schemas the
// checks before compiling admit, each with the CPU time and memory its
// child used.
func TestSchemaCompileChildMeasuresTheLargestSchemas(t *testing.T) {
	requireChildren(t)
	if testing.Short() || raceEnabled {
		t.Skip("a measurement")
	}
	small := `{"type":"object","properties":{"id":{"type":"string"},"n":{"type":"integer"}}}`
	var child, here []time.Duration
	for range 15 {
		start := time.Now()
		_, err := runCompileChild(t.Context(), FormatJSONSchema, 1, small, nil, defaultCompileLimits)
		require.NoError(t, err)
		child = append(child, time.Since(start))
		start = time.Now()
		_, err = compileSchema(t.Context(), FormatJSONSchema, 1, small, nil)
		require.NoError(t, err)
		here = append(here, time.Since(start))
	}
	slices.Sort(child)
	slices.Sort(here)
	t.Logf("a small schema: %v in a child, %v in the process (medians of 15)", child[7].Round(time.Microsecond), here[7].Round(time.Microsecond))

	var chain strings.Builder
	chain.WriteString("syntax = \"proto3\";\n")
	for i := range 8_000 {
		fmt.Fprintf(&chain, "message M%d { M%d a = 1; string b = 2; }\n", i, (i+1)%8_000)
	}
	for _, c := range []struct{ format, name, schema string }{
		{FormatProtobuf, "8,000 Protobuf messages, each holding the next", chain.String()},
		{FormatAvro, "an Avro record of 15,000 fields", `{"type":"record","name":"r","fields":[` + list(15_000, func(i int) string { return fmt.Sprintf(`{"name":"f%d","type":["null","string"],"default":null}`, i) }) + `]}`},
		{FormatJSONSchema, "a const of 94,000 subnormals", `{"const":[` + list(94_000, func(i int) string { return fmt.Sprintf("%de-320", i+1) }) + `]}`},
		{FormatJSONSchema, "a 300-byte name above 4,900 subschemas", `{"properties":{"` + strings.Repeat("n", 300) + `":{"properties":{` + list(4900, func(i int) string { return fmt.Sprintf(`"%d":{}`, i) }) + `}}}}`},
		{FormatJSONSchema, "1,100 refs to locations under an unknown keyword", `{"x":{` + list(1100, func(i int) string { return fmt.Sprintf(`"%d":{"minimum":%d}`, i, i) }) + `},"anyOf":[` + list(1100, func(i int) string { return fmt.Sprintf(`{"$ref":"#/x/%d"}`, i) }) + `]}`},
		{FormatJSONSchema, "a megabyte of description", `{"description":"` + strings.Repeat("a", 1<<20-20) + `"}`},
	} {
		require.NoError(t, checkSchemaSize(c.schema, nil), c.name)
		usage, err := runCompileChild(t.Context(), c.format, 1, c.schema, nil, defaultCompileLimits)
		require.NoError(t, err, c.name)
		require.Positive(t, usage.Heap, "%s: it compiles", c.name)
		t.Logf("%-50s %8d bytes: %6v of CPU, %4d MiB peak in the child, holds %5.1f MiB compiled", c.name, len(c.schema), usage.CPU.Round(time.Millisecond), usage.MaxRSS>>20, float64(usage.Heap)/(1<<20))
	}
}

// The worker's stop (a revoke, a shutdown) while a child compiles is the
// environment's, not the schema's: the decoder answers unavailable.
func TestSchemaCompileStoppedByTheWorkerIsNotARefusal(t *testing.T) {
	requireChildren(t)
	reg := newMemRegistry()
	reg.add(3, "s", 1, sr.Schema{Type: sr.TypeJSON, Schema: `{"type":"object"}`})
	rd := newRegistryDecoder(FormatJSONSchema, reg)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := rd.schema(ctx, 3, false)
	require.ErrorIs(t, err, ErrSchemaRegistryUnavailable)
	var de *DecodeError
	require.False(t, errors.As(err, &de), "not a dead letter")
}

// A thread the child cannot make is its memory only when it said its
// memory was near the limit; otherwise it is the machine's process limit
// (review 21: RLIMIT_NPROC refused a one-field schema for 24 hours).
func TestSchemaCompileChildsThreadFailureIsClassifiedByItsMemory(t *testing.T) {
	cgo := "runtime/cgo: pthread_create failed: Resource temporarily unavailable\nSIGABRT: abort\n"
	nocgo := "runtime: failed to create new OS thread (have 5 already; errno=11)\nfatal error: newosproc\n"
	for _, c := range []struct {
		stderr string
		memory bool
	}{
		{cgo, false},
		{nocgo, false},
		{childMemoryHigh + "\n" + cgo, true},
		{childMemoryHigh + "\n" + nocgo, true},
		{"fatal error: runtime: cannot allocate memory\n", true},
		{"runtime: out of memory: cannot allocate 4194304-byte block (67108864 in use)\nfatal error: out of memory\n", true},
	} {
		require.Equal(t, c.memory, outOfMemory(c.stderr), c.stderr)
	}
}

// Refusals for good are kept when maxRefusals of them are live: the one
// nearest its end makes room. The minute-long ones are not pushed out.
func TestRefusalsForGoodMakeRoom(t *testing.T) {
	now := time.Now()
	forGood, short := map[int]refusal{}, map[int]refusal{}
	for id := range maxRefusals {
		forGood[id+1] = refusal{until: now.Add(time.Hour + time.Duration(id)*time.Second)}
		short[id+1] = refusal{until: now.Add(time.Minute)}
	}
	de := decodeErr(ReasonUnusableSchema, "x")
	remember(forGood, 1_000_000, de, now, refusalForGood, true)
	require.Contains(t, forGood, 1_000_000)
	require.NotContains(t, forGood, 1, "the one nearest its end")
	require.Len(t, forGood, maxRefusals)
	remember(short, 1_000_000, de, now, refusalTTL, false)
	require.NotContains(t, short, 1_000_000)
	require.Contains(t, short, 1)
}
