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
	}
}

// A schema whose compile goes past the child's memory or time is refused
// as unusable_schema, and the worker never compiles it itself. (The limits
// are lowered here so that a schema the checks before compiling admit goes
// past them.)
func TestSchemaCompilePastTheChildsLimitsIsRefused(t *testing.T) {
	requireChildren(t)
	// 4,000 properties with a pattern each: tens of megabytes compiled.
	wide := `{"type":"object","properties":{` + list(4000, func(i int) string {
		return fmt.Sprintf(`"field_%d":{"type":"string","pattern":"^[a-z]{1,%d}$","minLength":%d}`, i, i%50+1, i%7)
	}) + `}}`
	usage, err := runCompileChild(t.Context(), FormatJSONSchema, 1, wide, nil, defaultCompileLimits)
	require.NoError(t, err, "within the default limits")
	t.Logf("the wide schema (%d bytes) took %v of CPU and %d MiB in the child", len(wide), usage.CPU.Round(time.Millisecond), usage.MaxRSS>>20)

	for _, c := range []struct {
		name   string
		limits compileLimits
		want   string
	}{
		{"memory", compileLimits{CPU: 5 * time.Second, Memory: 4 << 20, Wall: time.Minute}, "needed more than 4 MiB of memory"},
		{"wall time", compileLimits{CPU: 5 * time.Second, Memory: 1 << 30, Wall: time.Millisecond}, "took longer than 1ms"},
	} {
		if c.name == "memory" && raceEnabled {
			continue // the race runtime maps its heap ahead, before the child limits itself
		}
		reg := newMemRegistry()
		reg.add(9, "s", 1, sr.Schema{Type: sr.TypeJSON, Schema: wide})
		rd := newRegistryDecoder(FormatJSONSchema, reg)
		rd.limits = c.limits
		_, err := rd.schema(t.Context(), 9, false)
		var de *DecodeError
		require.ErrorAs(t, err, &de, c.name)
		require.Equal(t, ReasonUnusableSchema, de.Reason, c.name)
		require.ErrorContains(t, err, c.want, c.name)
		require.ErrorContains(t, err, "schema 9 cannot be used", c.name)
		t.Logf("%s: %v", c.name, err)
	}
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

	for _, c := range []struct{ name, schema string }{
		{"a const of 94,000 subnormals", `{"const":[` + list(94_000, func(i int) string { return fmt.Sprintf("%de-320", i+1) }) + `]}`},
		{"a 300-byte name above 4,900 subschemas", `{"properties":{"` + strings.Repeat("n", 300) + `":{"properties":{` + list(4900, func(i int) string { return fmt.Sprintf(`"%d":{}`, i) }) + `}}}}`},
		{"1,100 refs to locations under an unknown keyword", `{"x":{` + list(1100, func(i int) string { return fmt.Sprintf(`"%d":{"minimum":%d}`, i, i) }) + `},"anyOf":[` + list(1100, func(i int) string { return fmt.Sprintf(`{"$ref":"#/x/%d"}`, i) }) + `]}`},
		{"a megabyte of description", `{"description":"` + strings.Repeat("a", 1<<20-20) + `"}`},
	} {
		usage, err := runCompileChild(t.Context(), FormatJSONSchema, 1, c.schema, nil, defaultCompileLimits)
		require.NoError(t, err, c.name)
		t.Logf("%-50s %8d bytes: %6v of CPU, %4d MiB peak in the child", c.name, len(c.schema), usage.CPU.Round(time.Millisecond), usage.MaxRSS>>20)
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
