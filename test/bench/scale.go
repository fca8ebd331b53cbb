package main

// Worker scaling (-scale 1,2,3, make scale): the pre-produced topic (-events
// records, -partitions partitions) drained by 1, 2, 3 … worker processes of
// one consumer group against one database. Each run gets a fresh schema and
// group; the processes start together with the defaults (dynamic
// membership), and the rounds alternate (1, 2, 3, 1, 2, 3, …) so that a
// noisy neighbour hurts every count alike; medians over -runs are compared.
//
// A group of several members spends its first seconds rebalancing, so the
// rate is taken from the moment the group has settled (every process owns
// partitions and together they own them all, from each one's
// effectively_assigned_partitions) to the last record applied; the rate
// from the first record applied is printed next to it. CPU per event is
// over the whole run (start-up included): the sum over the worker
// processes, and this stack's PostgreSQL.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"text/tabwriter"
	"time"
)

// scaleRun is one run with procs worker processes.
type scaleRun struct {
	procs   int
	records int64
	// rate is over settled → done; full over first record applied → done.
	rate, full  float64
	settled     bool
	settleAfter time.Duration // from the first process's start
	total       time.Duration // start → done
	workerCPU   float64       // CPU seconds, summed over the processes
	pgCPU       float64
	busy, cap   float64 // machine CPU seconds
	rebalances  float64 // effectively_rebalances_total, summed
	problems    []string
}

// scaleReport is what -scale prints.
type scaleReport struct {
	opts      options
	started   time.Time
	wall      time.Duration
	loadStart string
	loadEnd   string
	worker    string
	topic     string
	counts    []int64
	pgScope   string
	runs      map[int][]scaleRun
	warnings  []string
}

func (b *bench) runScale(ctx context.Context) (*scaleReport, error) {
	rep := &scaleReport{opts: b.opts, started: time.Now(), loadStart: loadAvg(), runs: map[int][]scaleRun{}}
	rep.worker = b.workerVersion(ctx)
	rep.pgScope = "this stack's postmaster and its children"
	if b.pgPid == 0 {
		rep.pgScope = "every process named postgres on the machine"
	}
	if err := b.produceMain(ctx); err != nil {
		return nil, err
	}
	rep.topic, rep.counts = b.topic, b.counts
	for i := range b.opts.runs {
		for _, n := range b.opts.scale {
			progress("scale round %d/%d: %d worker process(es)", i+1, b.opts.runs, n)
			r, err := b.scaleOnce(ctx, n)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err != nil {
				msg := fmt.Sprintf("%d process(es), run %d failed: %v", n, i+1, err)
				progress("WARNING: %s", msg)
				rep.warnings = append(rep.warnings, msg)
				continue
			}
			for _, p := range r.problems {
				rep.warnings = append(rep.warnings, fmt.Sprintf("%d process(es), run %d: %s", n, i+1, p))
			}
			progress("%d process(es), run %d: %.0f events/s settled (settled after %s), %.0f from the first record applied",
				n, i+1, r.rate, r.settleAfter.Round(time.Millisecond), r.full)
			rep.runs[n] = append(rep.runs[n], r)
		}
	}
	rep.loadEnd = loadAvg()
	rep.wall = time.Since(rep.started)
	return rep, nil
}

// scaleOnce runs n worker processes of one group on the main topic and a
// fresh schema until the topic is applied.
func (b *bench) scaleOnce(ctx context.Context, n int) (scaleRun, error) {
	r := scaleRun{procs: n}
	d, err := b.newDB(ctx, fmt.Sprintf("scale%d", n), migrateWorker)
	if err != nil {
		return r, err
	}
	defer d.drop(context.WithoutCancel(ctx))
	group := b.name(fmt.Sprintf("scale%d", n))
	target := int64(b.opts.events)

	before := takeCPUSnapshot()
	start := time.Now()
	ws := make([]*worker, 0, n)
	stopAll := func() {
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Go(func() {
				if code := w.stop(time.Minute); code != 0 {
					progress("warning: worker %d exited with code %d after SIGTERM", w.cmd.Process.Pid, code)
				}
			})
		}
		wg.Wait()
	}
	defer stopAll()
	for range n {
		w, err := b.startWorker(d, group, b.topic)
		if err != nil {
			return r, err
		}
		ws = append(ws, w)
	}

	var first, settledAt, done time.Time
	var settledApplied, last int64
	lastMove, lastCheck := time.Now(), time.Time{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, w := range ws {
			if w.exited() {
				return r, w.failed(errors.New("a worker exited"))
			}
		}
		applied, err := d.applied(ctx, group, b.topic)
		now := time.Now()
		if err != nil {
			return r, fmt.Errorf("reading positions: %w", err)
		}
		if applied > 0 && first.IsZero() {
			first = now
		}
		if applied >= target {
			done, last = now, applied
			break
		}
		if settledAt.IsZero() && now.Sub(lastCheck) >= 250*time.Millisecond {
			lastCheck = now
			if ok, err := settled(ctx, ws, b.opts.partitions); err != nil {
				return r, err
			} else if ok {
				settledAt, settledApplied = now, applied
			}
		}
		if applied != last {
			last, lastMove = applied, now
		} else if now.Sub(lastMove) > progressWait {
			return r, fmt.Errorf("%w for %s at %d of %d records", errStalled, progressWait, applied, target)
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-tick.C:
		}
	}
	u := cpuBetween(before, takeCPUSnapshot())
	r.records, r.total = last, done.Sub(start)
	for _, w := range ws {
		r.workerCPU += u.pid(w.cmd.Process.Pid)
		if s, err := scrape(ctx, w.http); err == nil {
			r.rebalances += value(s, "effectively_rebalances_total", nil)
		}
	}
	r.pgCPU, r.busy, r.cap = b.pgCPU(u), u.busy, u.capacity
	if done.After(first) {
		r.full = float64(last) / done.Sub(first).Seconds()
	}
	if !settledAt.IsZero() && done.After(settledAt) {
		r.settled, r.settleAfter = true, settledAt.Sub(start)
		r.rate = float64(last-settledApplied) / done.Sub(settledAt).Seconds()
	} else {
		r.rate = r.full // the group never settled before the end: the whole run
	}
	stopAll()
	b.deleteGroup(ctx, group)
	if r.problems, err = d.check(ctx, b.exp); err != nil {
		return r, err
	}
	return r, nil
}

// settled reports whether every worker owns partitions and together they
// own all of them (effectively_assigned_partitions).
func settled(ctx context.Context, ws []*worker, partitions int) (bool, error) {
	total := 0
	for _, w := range ws {
		s, err := scrape(ctx, w.http)
		if err != nil {
			return false, nil // not serving yet
		}
		n := int(value(s, "effectively_assigned_partitions", nil))
		if n == 0 {
			return false, nil
		}
		total += n
	}
	return total == partitions, nil
}

func (r *scaleReport) print(out io.Writer) {
	o := r.opts
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "effectively worker scaling (make scale): prints, never asserts\n\n")
	fmt.Fprintf(w, "started\t%s, wall time %s\n", r.started.Format(time.RFC3339), r.wall.Round(time.Second))
	fmt.Fprintf(w, "machine\tnproc %d; load average %s at start, %s at end (a shared machine: other work counts in the machine's CPU)\n", runtime.NumCPU(), r.loadStart, r.loadEnd)
	fmt.Fprintf(w, "worker\t%s %s, defaults (dynamic membership, postgres.max_conns sized from the owned partitions)\n", o.bin, r.worker)
	fmt.Fprintf(w, "workload\tseed %d, %d records, %d partitions %v, %d accounts, 10%% duplicates, 10%% out of order\n", o.seed, o.events, o.partitions, r.counts, o.accounts)
	fmt.Fprintf(w, "method\tN processes of one group on one database (fresh schema per run), rounds alternate %v, %d round(s); events/s = records applied from the group settled (every process owns partitions, all owned) to done, over that time; CPU per event over the whole run / records\n",
		o.scale, o.runs)
	w.Flush()
	fmt.Fprintln(out)

	base := 0.0
	if len(o.scale) > 0 {
		base = median(rateOf(r.runs[slices.Min(o.scale)], func(s scaleRun) float64 { return s.rate }))
	}
	hdr := "processes\tmedian ev/s\tratio to " + fmt.Sprint(slices.Min(o.scale))
	for i := range o.runs {
		hdr += fmt.Sprintf("\trun %d", i+1)
	}
	hdr += "\tfrom first record ev/s\tsettled after\tworker µs/event (sum)\tPostgreSQL µs/event\tmachine busy\trebalances"
	fmt.Fprintln(w, hdr)
	for _, n := range o.scale {
		runs := r.runs[n]
		if len(runs) == 0 {
			fmt.Fprintf(w, "%d\tno successful run\n", n)
			continue
		}
		rate := median(rateOf(runs, func(s scaleRun) float64 { return s.rate }))
		line := fmt.Sprintf("%d\t%.0f\t%.2f", n, rate, ratio(rate, base))
		for i := range o.runs {
			if i < len(runs) {
				mark := ""
				if !runs[i].settled {
					mark = "*"
				}
				line += fmt.Sprintf("\t%.0f%s", runs[i].rate, mark)
			} else {
				line += "\t-"
			}
		}
		line += fmt.Sprintf("\t%.0f\t%.1fs\t%.1f\t%.1f\t%.0f%%\t%.0f",
			median(rateOf(runs, func(s scaleRun) float64 { return s.full })),
			median(rateOf(runs, func(s scaleRun) float64 { return s.settleAfter.Seconds() })),
			median(rateOf(runs, func(s scaleRun) float64 { return 1e6 * s.workerCPU / float64(s.records) })),
			median(rateOf(runs, func(s scaleRun) float64 { return 1e6 * s.pgCPU / float64(s.records) })),
			median(rateOf(runs, func(s scaleRun) float64 { return 100 * s.busy / max(s.cap, 1e-9) })),
			median(rateOf(runs, func(s scaleRun) float64 { return s.rebalances })))
		fmt.Fprintln(w, line)
	}
	w.Flush()
	fmt.Fprintf(out, "\nPostgreSQL: %s.\n", r.pgScope)
	for _, runs := range r.runs {
		if slices.ContainsFunc(runs, func(s scaleRun) bool { return !s.settled }) {
			fmt.Fprintln(out, "*: the group had not settled before the end; the rate is from the first record applied.")
			break
		}
	}
	fmt.Fprintln(out)
	if len(r.warnings) == 0 {
		fmt.Fprintln(out, "warnings: none (each run checked: claims = expected distinct events, ledger totals = expected)")
		return
	}
	fmt.Fprintln(out, "warnings:")
	for _, msg := range r.warnings {
		fmt.Fprintf(out, "  WARNING: %s\n", msg)
	}
}

func rateOf(runs []scaleRun, f func(scaleRun) float64) []float64 {
	out := make([]float64, 0, len(runs))
	for _, r := range runs {
		out = append(out, f(r))
	}
	return out
}
