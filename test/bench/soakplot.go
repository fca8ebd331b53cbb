package main

import (
	"bytes"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The soak's plot: one panel per quantity over the run's minutes, stacked
// and aligned on the time axis. gonum.org/v1/plot draws it; only this
// program imports it, never the worker (go list -deps ./cmd/effectively).

// soakSeries is one line of a panel.
type soakSeries struct {
	name  string
	color color.Color
	y     func(soakPoint) (float64, bool)
}

// soakPanel is one panel.
type soakPanel struct {
	title, unit string
	series      []soakSeries
}

var (
	blue   = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	orange = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	green  = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	red    = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	gray   = color.RGBA{R: 127, G: 127, B: 127, A: 255}
)

func always(f func(soakPoint) float64) func(soakPoint) (float64, bool) {
	return func(p soakPoint) (float64, bool) { return f(p), true }
}

func quantileMs(q func(soakPoint) quantileResult) func(soakPoint) (float64, bool) {
	return func(p soakPoint) (float64, bool) { r := q(p); return 1000 * r.v, r.ok }
}

func (r *soakReport) panels() []soakPanel {
	return []soakPanel{
		{"throughput", "events/s", []soakSeries{
			{"applied", blue, always(func(p soakPoint) float64 { return p.rate })},
			{"offered", gray, always(func(p soakPoint) float64 { return p.offered })},
		}},
		{"produce → commit latency", "ms", []soakSeries{
			{"p50", blue, quantileMs(func(p soakPoint) quantileResult { return p.p50 })},
			{"p99", red, quantileMs(func(p soakPoint) quantileResult { return p.p99 })},
		}},
		{"CPU", "cores", []soakSeries{
			{"worker", blue, always(func(p soakPoint) float64 { return p.workerCPU })},
			{"PostgreSQL", orange, always(func(p soakPoint) float64 { return p.pgCPU })},
			{"bench (paced producer)", gray, always(func(p soakPoint) float64 { return p.benchCPU })},
		}},
		{"worker memory", "MiB", []soakSeries{
			{"RSS", blue, always(func(p soakPoint) float64 { return mib(p.rss) })},
			{"Go heap in use", green, always(func(p soakPoint) float64 { return mib(p.heap) })},
			{"fetched, not applied (keys + values)", orange, always(func(p soakPoint) float64 { return mib(p.buffered) })},
		}},
		{"claims storage (" + r.table + ")", "MiB", []soakSeries{
			{"table + indexes", blue, always(func(p soakPoint) float64 { return mib(p.claims.bytes) })},
			{"indexes", green, always(func(p soakPoint) float64 { return mib(p.claims.indexBytes) })},
		}},
		{"PostgreSQL's WAL per applied event", "bytes", []soakSeries{
			{"WAL", blue, always(func(p soakPoint) float64 { return p.walPerEvent })},
			{"full-page images × 8 kB", orange, always(func(p soakPoint) float64 { return 8192 * p.fpiPerEvent })},
		}},
		{"claims tuples (estimates)", "rows", []soakSeries{
			{"live", blue, always(func(p soakPoint) float64 { return float64(p.claims.live) })},
			{"dead", red, always(func(p soakPoint) float64 { return float64(p.claims.dead) })},
			{"pruned per sample", gray, always(func(p soakPoint) float64 { return p.prunedRows })},
		}},
	}
}

// plot renders the panels as a PNG.
func (r *soakReport) plot() ([]byte, error) {
	panels := r.panels()
	rows := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Y.Label.Text = pn.unit
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		if i == len(panels)-1 {
			p.X.Label.Text = "minutes since the measured run started (before 0: the warm-up)"
		}
		top := 0.0
		for _, s := range pn.series {
			var xys plotter.XYs
			for _, pt := range r.points[1:] {
				if y, ok := s.y(pt); ok {
					xys = append(xys, plotter.XY{X: r.opts.soak.clock(pt.elapsed).Minutes(), Y: y})
					top = max(top, y)
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return nil, fmt.Errorf("panel %s, %s: %w", pn.title, s.name, err)
			}
			l.Color = s.color
			l.Width = vg.Points(1.2)
			p.Add(l)
			p.Legend.Add(s.name, l)
		}
		// Headroom above the data for the legend (top right).
		p.Y.Max = max(top*(1+0.12*float64(len(pn.series))), 1)
		rows[i] = []*plot.Plot{p}
	}
	if len(r.points) > 1 {
		// The same time axis on every panel.
		first, end := r.opts.soak.clock(r.points[0].elapsed), r.opts.soak.clock(r.points[len(r.points)-1].elapsed)
		for _, row := range rows {
			row[0].X.Min, row[0].X.Max = first.Minutes(), end.Minutes()
		}
	}
	img := vgimg.New(9*vg.Inch, vg.Length(len(panels))*2.2*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(10)}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
