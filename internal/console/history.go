package console

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HistoryWindow is how far back the throughput history goes.
const HistoryWindow = time.Hour

// dispositions are the chart's series, in drawing order.
var dispositions = []struct{ name, color string }{
	{"applied", "#1b7f3b"},
	{"duplicate", "#5561c9"},
	{"stale", "#8a6d00"},
	{"parked", "#b35c00"},
	{"dead_lettered", "#c0152f"},
}

// eventsMetric is the counter of records by topic and disposition.
const eventsMetric = "effectively_events_total"

// sample is the events counter's totals by disposition at one time.
type sample struct {
	at     time.Time
	totals map[string]float64
}

// History keeps the worker's throughput by disposition over the last hour,
// sampled from its own metrics (effectively_events_total) every interval.
// It exists only while the console is on.
type History struct {
	gatherer prometheus.Gatherer
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	samples []sample
}

// NewHistory samples g every interval once Run runs.
func NewHistory(g prometheus.Gatherer, interval time.Duration) *History {
	return &History{gatherer: g, interval: interval, now: time.Now}
}

// Run samples until ctx ends.
func (h *History) Run(ctx context.Context) error {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		h.sample()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (h *History) read() (sample, bool) {
	mfs, err := h.gatherer.Gather()
	if err != nil && len(mfs) == 0 {
		return sample{}, false
	}
	s := sample{at: h.now(), totals: map[string]float64{}}
	for _, mf := range mfs {
		if mf.GetName() != eventsMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "disposition" {
					s.totals[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return s, true
}

func (h *History) sample() {
	s, ok := h.read()
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples = append(h.samples, s)
	cut := 0
	for cut < len(h.samples)-1 && s.at.Sub(h.samples[cut].at) > HistoryWindow {
		cut++
	}
	h.samples = h.samples[cut:]
}

// Chart is the throughput chart as the Overview draws it.
type Chart struct {
	// Series are the polylines, one per disposition.
	Series []Series
	// Max is the top of the y axis, records per second.
	Max string
	// Span is the time the chart covers.
	Span string
	// Summary says the totals in words, for screen readers and the table.
	Summary string
	// Totals are the records per disposition over the span.
	Totals []Total
	// Empty: fewer than two samples yet.
	Empty bool
}

// Series is one disposition's line.
type Series struct {
	Name, Color string
	Points      string
}

// Total is one disposition's count over the chart's span.
type Total struct {
	Name, Color string
	Count       int64
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH = 600.0, 160.0
)

// Chart draws the history, the current counters included as the last point.
func (h *History) Chart() Chart {
	if h == nil {
		return Chart{Empty: true, Summary: "no history: this console does not run inside a worker"}
	}
	h.mu.Lock()
	samples := append([]sample(nil), h.samples...)
	h.mu.Unlock()
	if s, ok := h.read(); ok {
		samples = append(samples, s)
	}
	if len(samples) < 2 {
		return Chart{Empty: true, Summary: "collecting: the first point comes after console.history_interval"}
	}
	first, last := samples[0], samples[len(samples)-1]
	span := last.at.Sub(first.at)
	// Rates between consecutive samples.
	rates := make([]map[string]float64, len(samples)-1)
	maxRate := 0.0
	for i := 1; i < len(samples); i++ {
		dt := samples[i].at.Sub(samples[i-1].at).Seconds()
		r := map[string]float64{}
		for _, d := range dispositions {
			v := 0.0
			if dt > 0 {
				v = math.Max(0, samples[i].totals[d.name]-samples[i-1].totals[d.name]) / dt
			}
			r[d.name] = v
			maxRate = math.Max(maxRate, v)
		}
		rates[i-1] = r
	}
	top := niceCeil(maxRate)
	c := Chart{Max: formatRate(top), Span: span.Round(time.Second).String()}
	var words []string
	for _, d := range dispositions {
		var pts strings.Builder
		for i, r := range rates {
			x := chartW * samples[i+1].at.Sub(first.at).Seconds() / math.Max(span.Seconds(), 1e-9)
			y := chartH - chartH*r[d.name]/top
			fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
		}
		c.Series = append(c.Series, Series{Name: d.name, Color: d.color, Points: strings.TrimSpace(pts.String())})
		n := int64(math.Round(math.Max(0, last.totals[d.name]-first.totals[d.name])))
		c.Totals = append(c.Totals, Total{Name: d.name, Color: d.color, Count: n})
		words = append(words, fmt.Sprintf("%s %d", d.name, n))
	}
	c.Summary = fmt.Sprintf("Records by disposition over the last %s: %s; peak %s records/s.", c.Span, strings.Join(words, ", "), formatRate(maxRate))
	return c
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func formatRate(v float64) string {
	if v >= 10 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
