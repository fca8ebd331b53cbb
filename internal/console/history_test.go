package console

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// The chart's totals are the counter's increase over the kept samples, by
// disposition across topics; samples older than an hour are dropped.
func TestHistoryChart(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	events := prometheus.NewCounterVec(prometheus.CounterOpts{Name: eventsMetric}, []string{"topic", "disposition"})
	reg.MustRegister(events)
	h := NewHistory(reg, time.Second)
	now := time.Unix(10_000, 0)
	h.now = func() time.Time { return now }

	require.True(t, h.Chart().Empty, "one point is no line")
	events.WithLabelValues("a", "applied").Add(5) // before the window: not counted
	h.sample()
	now = now.Add(2 * time.Hour)
	h.sample() // drops the first
	events.WithLabelValues("a", "applied").Add(10)
	events.WithLabelValues("b", "applied").Add(20)
	events.WithLabelValues("b", "dead_lettered").Add(3)
	now = now.Add(10 * time.Second)
	h.sample()
	now = now.Add(10 * time.Second)
	c := h.Chart() // the current counters are the last point

	require.False(t, c.Empty)
	require.Len(t, h.samples, 2)
	counts := map[string]int64{}
	for _, tot := range c.Totals {
		counts[tot.Name] = tot.Count
	}
	require.Equal(t, map[string]int64{"applied": 30, "duplicate": 0, "stale": 0, "parked": 0, "dead_lettered": 3}, counts)
	require.Equal(t, "5", c.Max, "a peak of 3 records/s rounds up to 5")
	require.Contains(t, c.Summary, "applied 30")
	for _, s := range c.Series {
		require.Len(t, strings.Fields(s.Points), 2, s.Name)
	}
}
