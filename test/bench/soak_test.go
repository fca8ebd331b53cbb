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
	r.opts.partitions = 4
	r.opts.soak = soakOptions{on: true, duration: 3 * time.Minute, retention: 30 * time.Second, pruneInterval: 10 * time.Second, sample: 10 * time.Second, report: "/tmp/x/soak.md", plot: "/tmp/x/soak.png"}
	var applied int64
	cum := make([]float64, len(les))
	for k := 0; k <= 18; k++ {
		p := soakPoint{elapsed: time.Duration(k) * 10 * time.Second, rss: int64(100+k) << 20, buffered: int64(k%4) << 20}
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
		// 800 bytes of WAL and a hundredth of a full-page image per event,
		// a checkpoint every minute.
		p.wal = walStats{bytes: applied * 800, fpi: applied / 100, checkpoints: int64(k / 6)}
		r.points = append(r.points, p)
	}
	for k := 1; k < len(r.points); k++ {
		r.points[k].window(r.points[k-1], cpuUse{wall: 10 * time.Second}, 0, &bench{})
	}
	return r
}

func TestSoakSummary(t *testing.T) {
	r := syntheticSoak()
	// 30 s of retention, the worker's default generation (15 s) and a
	// 10 s prune pass: the probe reads its rate from 55 s.
	require.Equal(t, 55*time.Second, r.opts.soak.steady())
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
	require.Contains(t, text, "samples 0:00 → 0:30 and 2:30 → 3:00")
	require.Contains(t, text, "first 1000 ev/s, last 1500 ev/s, last/first 1.500")
	// RSS grows 1 MiB per 10 s: 360 MiB/hour.
	require.Contains(t, text, "+360.0 MiB/hour over the measured run")
	require.Contains(t, text, "max 18.0 MiB at 3:00")
	// Buffered 0, 1, 2, 3, 0, … MiB; r.opts.partitions 4.
	require.Contains(t, text, "first 1.0 MiB, last 2.0 MiB, max 3.0 MiB at 0:30; the queues pause their partitions at 4 × 8 MiB, and all of them at consumer.max_inflight_bytes (64 MiB)")
	// Six stretches of 30 s: two at the first minute's latency, four at
	// the slower one's.
	require.Contains(t, text, "p99 by stretch of the measured run: 0:00→0:30 19.9 ms, 0:30→1:00 19.9 ms, 1:00→1:30 79.6 ms")
	require.Contains(t, text, "highest/lowest 4.00")
	require.NotContains(t, text, "warm-up:", "no warm-up, no warm-up line")
	require.InDelta(t, 800, r.points[5].walPerEvent, 1e-9)
	require.InDelta(t, 0.01, r.points[12].fpiPerEvent, 1e-9)
	require.Equal(t, int64(1), r.points[6].checkpoints)
	require.Contains(t, text, "WAL per applied event: first 800 B (0.010 full-page images), last 800 B (0.010), last/first 1.00; checkpoints started in the measured run: 3 (one per 1m0s)")

	md := r.markdown()
	require.Equal(t, len(r.points)-1, strings.Count(md, "\n| ")-1, "one markdown row per sample after t = 0, and the header")
	require.Contains(t, md, "![soak plot](soak.png)")
}

// With a warm-up of a minute the first minute's samples are shown at
// negative times and the comparison is over the two minutes after it, all
// at 1,500 ev/s and the slower latency.
func TestSoakSummaryAfterWarmup(t *testing.T) {
	r := syntheticSoak()
	r.opts.soak.warmup, r.opts.soak.duration = time.Minute, 2*time.Minute
	require.Equal(t, 6, r.measuredFrom())
	r.summarize()
	text := strings.Join(r.summaryText, "\n")
	require.Contains(t, text, "samples 0:00 → 0:20 and 1:40 → 2:00")
	require.Contains(t, text, "first 1500 ev/s, last 1500 ev/s, last/first 1.000 (target within 10%: met)")
	require.Contains(t, text, "last/first 1.00 (target within 20%: met)")
	require.Contains(t, text, "warm-up: 1m0s at the offered rate before the measured run (samples -1:00 → 0:00")
	// From the cold start (the warm-up's first 20 s at the fast latency)
	// the last stretch is four times slower.
	require.Contains(t, text, "p99 last/cold 4.00, throughput 1.500")
	require.Contains(t, text, "measured run's first sample 106.0 MiB")

	md := r.markdown()
	require.Contains(t, md, "| -0:10 | 1000 |", "warm-up samples at negative times")
	require.Contains(t, md, "| 2:00 | 1500 |")
}

func TestSoakPlot(t *testing.T) {
	r := syntheticSoak()
	b, err := r.plot()
	require.NoError(t, err)
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err)
	require.Greater(t, img.Bounds().Dy(), img.Bounds().Dx(), "panels stacked vertically")
}
