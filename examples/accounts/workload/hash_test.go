package workload_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/internal/canonicaltree"
)

// TestWorkloadHashesMatchTree decodes the reference workload's events (what
// the demo, the end-to-end tests and the benchmark send) and checks every
// payload hash and content-hash key against the tree canonicaliser the
// streaming one replaced.
func TestWorkloadHashesMatchTree(t *testing.T) {
	t.Parallel()
	decoders := map[string]*event.Decoder{}
	for _, strategy := range []string{event.StrategyCloudEvents, event.StrategyContentHash} {
		d, err := event.NewDecoder(event.DecoderConfig{Topic: "accounts", KeyStrategy: strategy})
		require.NoError(t, err)
		decoders[strategy] = d
	}
	cfg := workload.Config{
		Accounts: 300, Events: 5000, Duplicates: 0.1, OutOfOrder: 0.1, Seed: 12,
		StartTime: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), TimeSpan: time.Hour,
	}
	n := 0
	types := map[string]int{}
	_, err := workload.Generate(cfg, func(r workload.Record) error {
		rec := event.Record{Topic: "accounts", Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
			Headers: []event.Header{{Key: "content-type", Value: []byte(workload.ContentType)}}}
		ev, err := decoders[event.StrategyCloudEvents].Decode(rec)
		require.NoError(t, err)
		want, err := canonicaltree.PayloadHash(ev.Type, ev.Subject, ev.Version, ev.Data)
		require.NoError(t, err)
		require.Equal(t, want, ev.PayloadHash, "%s", r.Value)

		canon, err := event.Canonicalize(ev.Data)
		require.NoError(t, err)
		wantCanon, err := canonicaltree.Canonicalize(ev.Data)
		require.NoError(t, err)
		require.Equal(t, string(wantCanon), string(canon))

		ch, err := decoders[event.StrategyContentHash].Decode(rec)
		require.NoError(t, err)
		require.Equal(t, want, ch.PayloadHash)
		n++
		types[ev.Type]++
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, cfg.Events, n)
	require.Len(t, types, 5, "every event type of the workload: %v", types)
}
