package main

import (
	"bytes"
	"image/png"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSlope(t *testing.T) {
	xs := []float64{0, 1, 2, 3, 4}
	ys := make([]float64, len(xs))
	for i, x := range xs {
		ys[i] = 7 - 2.5*x
	}
	require.InDelta(t, -2.5, slope(xs, ys), 1e-9)
	require.Zero(t, slope([]float64{1}, []float64{3}), "one point has no trend")
	require.Zero(t, slope([]float64{2, 2}, []float64{1, 5}), "no spread in x has no trend")
}

func TestCompareSpan(t *testing.T) {
	span, _ := compareSpan(30 * time.Minute)
	require.Equal(t, 5*time.Minute, span)
	span, name := compareSpan(3 * time.Minute)
	require.Equal(t, 30*time.Second, span)
	require.Contains(t, name, "sixth")
}

// syntheticSoak is a 3-minute soak sampled every 10 s: 1,000 ev/s applied
// for the first minute, 1,500 after; every window's latencies in the
// bucket (0.01, 0.02] for the first minute and (0.04, 0.08] after; RSS
// growing by 1 MiB per sample.
func syntheticSoak() *soakReport {
	les := []float64{0.01, 0.02, 0.04, 0.08, math.Inf(1)}
	r := &soakReport{table: "processed_events", rate: 1500, max: 2000, events: 240_000, accounts: 10}
	r.opts.soak = soakOptions{on: true, duration: 3 * time.Minute, retention: 30 * time.Second, pruneInterval: 10 * time.Second, sample: 10 * time.Second, report: "/tmp/x/soak.md", plot: "/tmp/x/soak.png"}
	var applied int64
	cum := make([]float64, len(les))
	for k := 0; k <= 18; k++ {
		p := soakPoint{elapsed: time.Duration(k) * 10 * time.Second, rss: int64(100+k) << 20}
		if k > 0 {
			rate := int64(1000)
			slow := 1 // index of the bucket the window's observations fall in
			if k > 6 {
				rate, slow = 1500, 3
			}
			applied += 10 * rate
			for i := slow; i < len(les); i++ {
				cum[i] += float64(10 * rate)
			}
		}
		p.applied, p.produced = applied, applied
		for i, le := range les {
			p.hist = append(p.hist, bucket{le, cum[i]})
		}
		p.claims = claimStats{rels: 1, bytes: int64(k) << 20, live: int64(k) * 1000}
		r.points = append(r.points, p)
	}
	for k := 1; k < len(r.points); k++ {
		r.points[k].window(r.points[k-1], cpuUse{wall: 10 * time.Second}, 0, &bench{})
	}
	return r
}

func TestSoakSummary(t *testing.T) {
	r := syntheticSoak()
	require.InDelta(t, 1000, r.points[1].rate, 1e-9)
	require.InDelta(t, 1500, r.points[18].rate, 1e-9)
	require.True(t, r.points[1].p99.ok)
	require.LessOrEqual(t, r.points[1].p99.v, 0.02)
	require.Greater(t, r.points[18].p99.v, 0.04)

	r.collectExtras()
	r.summarize()
	text := strings.Join(r.summaryText, "\n")
	// The first sixth (30 s) is samples 0 → 3 at 1,000 ev/s; the last is
	// 2m30s → 3m0s at 1,500.
	require.Contains(t, text, "samples 0s → 30s and 2m30s → 3m0s")
	require.Contains(t, text, "first 1000 ev/s, last 1500 ev/s, last/first 1.500")
	// RSS grows 1 MiB per 10 s: 360 MiB/hour.
	require.Contains(t, text, "+360.0 MiB/hour over the run's samples")
	require.Contains(t, text, "max 18.0 MiB at 3m0s")

	md := r.markdown()
	require.Equal(t, len(r.points)-1, strings.Count(md, "\n| ")-1, "one markdown row per sample after t = 0, and the header")
	require.Contains(t, md, "![soak plot](soak.png)")
}

func TestSoakPlot(t *testing.T) {
	r := syntheticSoak()
	b, err := r.plot()
	require.NoError(t, err)
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err)
	require.Greater(t, img.Bounds().Dy(), img.Bounds().Dx(), "panels stacked vertically")
}
