package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/internal/pipeline"
)

// A parked event comes back whole, its producer's trace context included,
// so that a released event's trace continues.
func TestParkedEventRoundTrip(t *testing.T) {
	t.Parallel()
	ev := event.Event{Source: "s", ID: "1", Type: "thing.set", Subject: "t1", Version: 3, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Data: []byte(`{"color":"blue"}`), Key: "ce:1:s:1", Strategy: event.StrategyCloudEvents, PayloadHash: [32]byte{1, 2, 3},
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "k=v"}
	raw, err := pipeline.MarshalParked(ev)
	require.NoError(t, err)
	got, err := pipeline.UnmarshalParked(raw)
	require.NoError(t, err)
	require.Equal(t, ev, got)

	// Events parked before trace context was kept have none.
	ev.TraceParent, ev.TraceState = "", ""
	raw, err = pipeline.MarshalParked(ev)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "traceparent")
	got, err = pipeline.UnmarshalParked(raw)
	require.NoError(t, err)
	require.Equal(t, ev, got)
}
