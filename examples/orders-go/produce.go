package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/examples/orders-go/workload"
	"github.com/effectively-io/effectively/service"
)

// generator is `produce --events N`: a generated workload of order events
// with duplicates and disorder (package workload); --expect writes the end
// state a correct worker reaches, for `verify`.
type generator struct {
	cfg    workload.Config
	events int
	expect string
}

var _ service.Workload = (*generator)(nil)

// generationOnly are the flags that mean nothing without --events.
var generationOnly = []string{"orders", "duplicates", "out-of-order", "orphans", "seed", "source", "expect"}

// Flags implements service.Workload.
func (g *generator) Flags(fs *pflag.FlagSet) {
	fs.IntVar(&g.events, "events", 0, "generate a workload of this many records (re-sends included) instead of reading --file")
	fs.IntVar(&g.cfg.Orders, "orders", 1000, "orders the generated workload places")
	fs.Float64Var(&g.cfg.Duplicates, "duplicates", 0.1, "fraction of records that re-send an earlier record (same id and payload)")
	fs.Float64Var(&g.cfg.OutOfOrder, "out-of-order", 0.1, "fraction of events swapped with their order's next event (at most 0.5)")
	fs.IntVar(&g.cfg.Orphans, "orphans", 0, "lines of orders that never arrive (they stay parked)")
	fs.Uint64Var(&g.cfg.Seed, "seed", 1, "workload seed: the same flags and seed give the same events")
	fs.StringVar(&g.cfg.Source, "source", workload.DefaultSource, "CloudEvents source of generated events")
	fs.StringVar(&g.expect, "expect", "", "write the expected end state to this JSON file (for verify)")
}

// Check implements service.Workload.
func (g *generator) Check(fs *pflag.FlagSet, file string) (bool, error) {
	switch {
	case g.events < 0:
		return false, fmt.Errorf("--events %d: want a number of records > 0 (or leave it out to send --file)", g.events)
	case g.events > 0 && file != "":
		return false, errors.New("--events and --file are mutually exclusive")
	case g.events == 0:
		for _, name := range generationOnly {
			if fs.Changed(name) {
				return false, fmt.Errorf("--%s applies to workload generation only: add --events N", name)
			}
		}
		return false, nil
	}
	g.cfg.Events = g.events
	if err := g.cfg.Validate(); err != nil {
		return false, fmt.Errorf("--%w", err) // its messages start with the flag's name
	}
	return true, nil
}

// Produce implements service.Workload.
func (g *generator) Produce(ctx context.Context, cl *kgo.Client, topic string, stdout, _ io.Writer) error {
	recs, exp, err := workload.Generate(g.cfg)
	if err != nil {
		return err
	}
	start := time.Now()
	var (
		mu       sync.Mutex
		firstErr error
		failed   int
	)
	for _, r := range recs {
		cl.Produce(ctx, kafkaRecord(topic, r), func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if failed++; firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("producing to %s: %w", topic, err)
	}
	if firstErr != nil {
		return fmt.Errorf("producing to %s: %d of %d records failed, first: %w", topic, failed, len(recs), firstErr)
	}
	if g.expect != "" {
		if err := exp.WriteFile(g.expect); err != nil {
			return fmt.Errorf("--expect: %w", err)
		}
	}
	fmt.Fprintf(stdout, "produced %d records to %s (%d distinct events, %d duplicates, %d swapped, %d lines before their order, %d orphans) in %s\n",
		exp.Records, topic, exp.Distinct, exp.Duplicates, exp.OutOfOrder, exp.LinesEarly, len(exp.Parked), time.Since(start).Round(time.Millisecond))
	return nil
}

// kafkaRecord is a generated record as the producer contract has it: keyed by
// order ID (franz-go's default partitioner hashes it with murmur2, like
// Java's), structured-mode CloudEvents.
func kafkaRecord(topic string, r workload.Record) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp,
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte(workload.ContentType)}}}
}
