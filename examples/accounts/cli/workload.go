package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/service"
)

// Workload is the reference domain's generator for `produce --events N`:
// account and ledger events (CloudEvents, structured mode) over --accounts
// accounts, with --duplicates re-sends and --out-of-order swaps; the same
// flags and --seed give the same events. --expect FILE writes the end state
// a correct worker reaches, for `verify`.
type Workload struct {
	f generateFlags
	g *workload.Generator
}

var _ service.Workload = (*Workload)(nil)

// Flags implements service.Workload.
func (w *Workload) Flags(fs *pflag.FlagSet) { w.f.register(fs) }

// Check implements service.Workload.
func (w *Workload) Check(fs *pflag.FlagSet, file string) (bool, error) {
	g, err := w.f.generator(fs, file)
	if err != nil {
		return false, err
	}
	w.g = g
	return g != nil, nil
}

// Produce implements service.Workload.
func (w *Workload) Produce(ctx context.Context, cl *kgo.Client, topic string, stdout, stderr io.Writer) error {
	return produceGenerated(ctx, cl, w.g, &w.f, topic, stdout, stderr)
}

// generateFlags are produce's workload-generation flags.
type generateFlags struct {
	accounts    int
	events      int
	duplicates  float64
	outOfOrder  float64
	ledgerShare float64
	seed        uint64
	source      string
	timeSpan    time.Duration
	expect      string
	progress    bool
}

// generationOnly names the flags that mean nothing without --events.
var generationOnly = []string{"accounts", "duplicates", "out-of-order", "ledger-share", "seed", "source", "time-span", "expect", "progress"}

func (f *generateFlags) register(fs *pflag.FlagSet) {
	fs.IntVar(&f.events, "events", 0, "generate a workload of this many records (re-sends included) instead of reading --file")
	fs.IntVar(&f.accounts, "accounts", 1000, "accounts the generated workload opens")
	fs.Float64Var(&f.duplicates, "duplicates", 0.1, "fraction of generated records that re-send an earlier record (same id and payload)")
	fs.Float64Var(&f.outOfOrder, "out-of-order", 0.1, "fraction of generated updates, closes and ledger events swapped with the account's next event (at most 0.5)")
	fs.Float64Var(&f.ledgerShare, "ledger-share", workload.DefaultLedgerShare, "fraction of generated events that are ledger credits and debits")
	fs.Uint64Var(&f.seed, "seed", 1, "workload seed: the same flags and seed give the same events (ids evt-<seed>-<n>; reusing a seed on a topic re-sends its events)")
	fs.StringVar(&f.source, "source", workload.DefaultSource, "CloudEvents source of generated events")
	fs.DurationVar(&f.timeSpan, "time-span", 0, "spread generated record timestamps evenly over this span, ending now (0: all now)")
	fs.StringVar(&f.expect, "expect", "", "write the expected end state of the generated workload to this JSON file")
	fs.BoolVar(&f.progress, "progress", false, "print generation progress to stderr every second")
}

// generator checks the flags and returns the workload generator, nil when
// --events is not set.
func (f *generateFlags) generator(fs *pflag.FlagSet, file string) (*workload.Generator, error) {
	switch {
	case f.events < 0:
		return nil, fmt.Errorf("--events %d: want a number of records > 0 (or leave it out to send --file)", f.events)
	case f.events > 0 && file != "":
		return nil, errors.New("--events and --file are mutually exclusive: generate a workload with --events, or send a file with --file")
	case f.events == 0:
		for _, name := range generationOnly {
			if fs.Changed(name) {
				return nil, fmt.Errorf("--%s applies to workload generation only: add --events N", name)
			}
		}
		return nil, nil
	case f.ledgerShare < 0 || f.ledgerShare > 1:
		return nil, fmt.Errorf("--ledger-share %v: want a fraction from 0 to 1", f.ledgerShare)
	}
	share := f.ledgerShare
	if share == 0 {
		share = -1 // the generator's "none"; its 0 means the default
	}
	g, err := workload.NewGenerator(workload.Config{
		Accounts:    f.accounts,
		Events:      f.events,
		Duplicates:  f.duplicates,
		OutOfOrder:  f.outOfOrder,
		LedgerShare: share,
		Seed:        f.seed,
		Source:      f.source,
		StartTime:   time.Now().Add(-f.timeSpan),
		TimeSpan:    f.timeSpan,
	})
	if err != nil {
		return nil, fmt.Errorf("--%w", err) // its messages start with the flag's name
	}
	return g, nil
}

// produceGenerated sends every record of g asynchronously, keyed by account
// ID with the generator's timestamps, and waits for every acknowledgement.
// It writes the expected state (--expect) only when every record was
// acknowledged: otherwise it would describe records the topic lacks.
func produceGenerated(ctx context.Context, cl *kgo.Client, g *workload.Generator, f *generateFlags, topic string, stdout, stderr io.Writer) error {
	headers := []kgo.RecordHeader{{Key: "content-type", Value: []byte(workload.ContentType)}}
	var (
		acked, failed atomic.Int64
		errMu         sync.Mutex
		firstErr      error
	)
	promise := func(_ *kgo.Record, err error) {
		if err == nil {
			acked.Add(1)
			return
		}
		if failed.Add(1) == 1 {
			errMu.Lock()
			firstErr = err
			errMu.Unlock()
		}
	}
	start := time.Now()
	nextReport := start.Add(time.Second)
	sent, complete := 0, false
	for ctx.Err() == nil {
		r, ok := g.Next()
		if !ok {
			complete = true
			break
		}
		// Produce blocks while produceMaxBuffered records are unacknowledged.
		cl.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Headers: headers}, promise)
		sent++
		if f.progress && sent%1024 == 0 {
			if now := time.Now(); now.After(nextReport) {
				nextReport = now.Add(time.Second)
				fmt.Fprintf(stderr, "produce: %d records sent, %d acknowledged, %d failed, %.0f records/s\n",
					sent, acked.Load(), failed.Load(), float64(acked.Load())/now.Sub(start).Seconds())
			}
		}
	}
	if err := cl.Flush(ctx); err != nil {
		// Interrupted: fail what is still buffered, so that every promise
		// has run before the counts are read.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = cl.AbortBufferedRecords(actx)
		cancel()
	}
	elapsed := time.Since(start)
	exp := g.Expected()
	nAcked, nFailed := acked.Load(), failed.Load()
	rate := float64(nAcked) / max(elapsed.Seconds(), 1e-9)
	switch {
	case !complete || ctx.Err() != nil:
		return fmt.Errorf("producing to %s: interrupted after sending %d of %d records (%d acknowledged, %d failed): %w",
			topic, sent, f.events, nAcked, nFailed, context.Cause(ctx))
	case nFailed > 0:
		errMu.Lock()
		defer errMu.Unlock()
		return fmt.Errorf("producing to %s: %d of %d records failed (%d acknowledged), first: %w", topic, nFailed, sent, nAcked, firstErr)
	}
	if f.expect != "" {
		if err := exp.WriteFile(f.expect); err != nil {
			return fmt.Errorf("--expect: %w", err)
		}
	}
	fmt.Fprintf(stdout, "produced %d records to %s (%d distinct, %d duplicates, %d out of order) in %s: %.0f records/s\n",
		nAcked, topic, exp.Distinct, exp.Duplicates, exp.OutOfOrder, elapsed.Round(time.Millisecond), rate)
	return nil
}

// ensureTopic creates topic when it does not exist, or, with recreate,
