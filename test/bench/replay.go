package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// replayResult is the bounded-replay measurement: the worker's first pass
// (E, on a schema of its own) over the topic, then `effectively replay
// --replay-group … --from-start` over the same range, where every record is
// a duplicate of an applied event and so runs no handler.
type replayResult struct {
	first measurement // the worker's first pass
	// records, rate and steady are the replay's own report (first applied
	// batch → done); wall is the command's whole run, start-up included.
	records      int64
	rate         float64
	steady, wall time.Duration
	dispositions map[string]int64
	cpu          cpuUse
}

// runReplay runs the first pass and the bounded replay after it.
func (b *bench) runReplay(ctx context.Context) (replayResult, error) {
	var r replayResult
	d, err := b.newDB(ctx, "replay", migrateWorker)
	if err != nil {
		return r, err
	}
	defer d.drop(context.WithoutCancel(ctx))
	group := b.name("replay-e")
	before := takeCPUSnapshot()
	w, err := b.startWorker(d, group, b.topic)
	if err != nil {
		return r, err
	}
	first, done, n, err := w.waitApplied(ctx, d, group, b.topic, int64(b.opts.events))
	if err != nil {
		w.stop(time.Minute)
		return r, err
	}
	r.first = measurement{records: n, total: done.Sub(w.start), steady: done.Sub(first), cpu: cpuBetween(before, takeCPUSnapshot())}
	if code := w.stop(time.Minute); code != 0 {
		progress("warning: the worker exited with code %d after SIGTERM", code)
	}
	b.deleteGroup(ctx, group)
	progress("replay: first pass %d records, %.0f events/s; now the bounded replay", n, r.first.rate())

	replayGroup := b.name("replay")
	cmd := exec.CommandContext(ctx, b.bin, "replay", "--topic", b.topic, "--replay-group", replayGroup, "--from-start", "--json")
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(b.brokers, ","),
		"EFFECTIVELY_KAFKA_GROUP=" + group,
		"EFFECTIVELY_KAFKA_TOPICS=" + b.topic,
		"EFFECTIVELY_POSTGRES_URL=" + d.url,
		"EFFECTIVELY_HTTP_ADDR=",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	before = takeCPUSnapshot()
	start := time.Now()
	err = cmd.Run()
	r.wall = time.Since(start)
	r.cpu = cpuBetween(before, takeCPUSnapshot())
	b.deleteGroup(ctx, replayGroup)
	if err != nil {
		return r, fmt.Errorf("effectively replay: %w; output (tail):\n%s", err, lastLines(stderr.String(), 20))
	}
	var rep struct {
		Records      int64            `json:"records"`
		Seconds      float64          `json:"seconds"`
		Rate         float64          `json:"records_per_second"`
		Dispositions map[string]int64 `json:"dispositions"`
		Complete     bool             `json:"complete"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return r, fmt.Errorf("reading the replay's report: %w\n%s", err, stdout.String())
	}
	if !rep.Complete {
		return r, fmt.Errorf("the replay reported itself incomplete:\n%s", stdout.String())
	}
	r.records, r.rate, r.dispositions = rep.Records, rep.Rate, rep.Dispositions
	r.steady = time.Duration(rep.Seconds * float64(time.Second))
	return r, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// printReplay writes the bounded-replay section of the report.
func (r *report) printReplay(out io.Writer) {
	switch rr := r.replay; {
	case r.opts.skip["replay"]:
		fmt.Fprintln(out, "bounded replay: skipped")
	case rr == nil:
		fmt.Fprintln(out, "bounded replay: failed (see warnings)")
	default:
		fmt.Fprintf(out, "bounded replay (effectively replay --replay-group G --from-start over the whole topic, after a first pass of the worker on its own schema):\n")
		fmt.Fprintf(out, "  first pass (E)  %d records, %.0f events/s (steady %s; start → done %s)\n",
			rr.first.records, rr.first.rate(), rr.first.steady.Round(time.Millisecond), rr.first.total.Round(time.Millisecond))
		fmt.Fprintf(out, "  replay          %d records, %.0f events/s (steady %s, first applied batch → done; whole command %s, %.0f events/s)\n",
			rr.records, rr.rate, rr.steady.Round(time.Millisecond), rr.wall.Round(time.Millisecond), float64(rr.records)/rr.wall.Seconds())
		fmt.Fprintf(out, "  dispositions    applied %d, duplicate %d, stale %d, parked %d, dead_lettered %d\n",
			rr.dispositions["applied"], rr.dispositions["duplicate"], rr.dispositions["stale"], rr.dispositions["parked"], rr.dispositions["dead_lettered"])
		if f := rr.first.rate(); f > 0 {
			ratio := rr.rate / f
			fmt.Fprintf(out, "  replay/E        %.2f (target ≥ 3, issue 12: duplicates skip the handlers) %s", ratio, verdict(ratio >= 3))
			if e := r.medianRate("E"); e > 0 {
				fmt.Fprintf(out, "; replay / median E of the rounds %.2f", rr.rate/e)
			}
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "  CPU: first pass %s; replay %s\n", rr.first.cpu, rr.cpu)
	}
}
