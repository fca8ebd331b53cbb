package main

import (
	"context"
	"fmt"
	"time"

	"github.com/effectively-io/effectively/examples/accounts/workload"
)

// e2eHistogram is the worker's histogram from a record's timestamp to the
// commit of its effects.
const e2eHistogram = "effectively_end_to_end_seconds"

// latencyResult is the paced run's outcome.
type latencyResult struct {
	offered  int           // events/s asked for
	duration time.Duration // of the paced run
	produced int           // records produced in the paced run
	achieved float64       // events/s actually produced
	observed float64       // histogram observations in the paced run
	accounts int
	p50, p99 quantileResult
	rss      int64
	cpu      cpuUse
}

type quantileResult struct {
	v, lo, hi float64
	ok        bool
}

// runLatency starts a worker on a topic of its own, lets it catch up with
// a short paced warm-up, then offers records at a fixed rate in 10 ms ticks
// (timestamped when handed to the producer) and reads the end-to-end
// histogram's change over the paced run.
func (b *bench) runLatency(ctx context.Context) (latencyResult, error) {
	o := b.opts
	res := latencyResult{offered: o.latencyRate, duration: o.latencyDuration}
	warm := int(float64(o.latencyRate) * o.latencyWarmup.Seconds())
	paced := int(float64(o.latencyRate) * o.latencyDuration.Seconds())
	// The same mix as the main workload: as many events per account.
	res.accounts = max(1, int(int64(o.accounts)*int64(warm+paced)/int64(o.events)))
	gen, err := workload.NewGenerator(workload.Config{
		Accounts: res.accounts, Events: warm + paced,
		Duplicates: 0.1, OutOfOrder: 0.1,
		Seed: o.seed + 1, StartTime: startTime,
	})
	if err != nil {
		return res, err
	}

	topic, err := b.newTopic(ctx, "latency")
	if err != nil {
		return res, err
	}
	d, err := b.newDB(ctx, "latency", migrateWorker)
	if err != nil {
		return res, err
	}
	defer d.drop(context.WithoutCancel(ctx))
	group := b.name("latency")
	cl, err := b.producer(topic)
	if err != nil {
		return res, err
	}
	defer cl.Close()
	p := &asyncProducer{cl: cl}

	w, err := b.startWorker(d, group, topic)
	if err != nil {
		return res, err
	}
	defer w.stop(time.Minute)
	if err := w.waitReady(ctx, time.Minute); err != nil {
		return res, err
	}

	if warm > 0 {
		if _, err := pace(ctx, gen, p, o.latencyRate, warm, "latency: warm-up"); err != nil {
			return res, err
		}
		if _, _, _, err := w.waitApplied(ctx, d, group, topic, int64(warm)); err != nil {
			return res, err
		}
	}
	s0, err := scrape(ctx, w.http)
	if err != nil {
		return res, err
	}
	before := takeCPUSnapshot()
	took, err := pace(ctx, gen, p, o.latencyRate, paced, "latency: paced run")
	if err != nil {
		return res, err
	}
	if _, _, _, err := w.waitApplied(ctx, d, group, topic, int64(warm+paced)); err != nil {
		return res, err
	}
	s1, err := scrape(ctx, w.http)
	if err != nil {
		return res, err
	}
	if res.rss, err = peakRSS(w.cmd.Process.Pid); err != nil {
		progress("warning: reading the worker's peak RSS: %v", err)
	}
	res.cpu = cpuBetween(before, takeCPUSnapshot())
	if code := w.stop(time.Minute); code != 0 {
		progress("warning: the latency worker exited with code %d after SIGTERM", code)
	}
	b.deleteGroup(ctx, group)

	match := map[string]string{"topic": topic}
	hist := subtract(histogram(s1, e2eHistogram, match), histogram(s0, e2eHistogram, match))
	res.produced = paced
	res.achieved = float64(paced) / took.Seconds()
	if len(hist) > 0 {
		res.observed = hist[len(hist)-1].count
	}
	for _, q := range []struct {
		q   float64
		out *quantileResult
	}{{0.5, &res.p50}, {0.99, &res.p99}} {
		v, lo, hi, ok := quantile(q.q, hist)
		*q.out = quantileResult{v, lo, hi, ok}
	}
	return res, nil
}

// pace offers n records of gen to p at rate records/s in 10 ms ticks, each
// timestamped when it is handed to the producer, and waits for their acks.
// It returns how long the offering took (the acks not included).
func pace(ctx context.Context, gen *workload.Generator, p *asyncProducer, rate, n int, what string) (time.Duration, error) {
	progress("%s, %d records at %d/s", what, n, rate)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	sent := 0
	for sent < n {
		due := min(n, int(float64(rate)*time.Since(start).Seconds()))
		for ; sent < due; sent++ {
			r, ok := gen.Next()
			if !ok {
				return 0, fmt.Errorf("the workload ran out after %d records", sent)
			}
			rec := toKafka(r)
			rec.Timestamp = time.Now()
			p.produce(ctx, rec)
		}
		if sent == n {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
	}
	took := time.Since(start)
	if err := p.flush(ctx); err != nil {
		return 0, fmt.Errorf("producing: %w", err)
	}
	return took, nil
}
