package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/pipeline"
)

// baselineRun is one run of B1 or B2.
type baselineRun struct {
	// total is from the start (client creation, for B1) to done; steady
	// is from the group's assignment to done for B1 (franz-go fetches ahead
	// in the background, so the first polled record would be too late a
	// start), the same as total for B2.
	total, steady time.Duration
	records       int64
	cpu           cpuUse
	problems      []string // correctness check (B2)
}

// runB1 reads the whole topic with a fresh franz-go group consumer and no
// database, fetching as the worker does (read committed, its fetch sizes,
// PollRecords of 4 × batch size).
func (b *bench) runB1(ctx context.Context) (baselineRun, error) {
	var r baselineRun
	def := config.Default()
	group := b.name("b1")
	before := takeCPUSnapshot()
	start := time.Now()
	var assignedAt atomic.Int64
	cl, err := kgo.NewClient(
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			assignedAt.CompareAndSwap(0, time.Now().UnixNano())
		}),
		kgo.SeedBrokers(b.brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(b.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.FetchMaxBytes(def.Kafka.FetchMaxBytes),
		kgo.BrokerMaxReadBytes(2*def.Kafka.FetchMaxBytes),
		kgo.FetchMaxPartitionBytes(def.Kafka.FetchMaxPartitionBytes),
	)
	if err != nil {
		return r, fmt.Errorf("b1 consumer: %w", err)
	}
	defer func() {
		cl.Close()
		b.deleteGroup(context.WithoutCancel(ctx), group)
	}()
	lastMove := time.Now()
	maxPoll := 4 * def.Consumer.BatchMaxRecords
	for r.records < int64(b.opts.events) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollRecords(pctx, maxPoll)
		cancel()
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		if fetches.IsClientClosed() {
			return r, errors.New("b1 consumer closed")
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			if p >= 0 && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("fetching %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return r, ferr
		}
		n := fetches.NumRecords()
		now := time.Now()
		if n > 0 {
			r.records += int64(n)
			lastMove = now
		} else if now.Sub(lastMove) > progressWait {
			return r, fmt.Errorf("b1: %w for %s at %d of %d records", errStalled, progressWait, r.records, b.opts.events)
		}
	}
	done := time.Now()
	r.cpu = cpuBetween(before, takeCPUSnapshot())
	r.total, r.steady = done.Sub(start), done.Sub(time.Unix(0, assignedAt.Load()))
	return r, nil
}

// b2Data is the workload in memory, partitioned as Kafka partitioned it.
type b2Data struct {
	parts [][]*kgo.Record
}

// b2Records generates the workload again with the same config and
// partitions it exactly as the producer did (murmur2 of the key, the
// sticky key partitioner that franz-go's default uses for keyed records),
// with offsets assigned per partition in order.
func (b *bench) b2Records() (*b2Data, error) {
	part := kgo.StickyKeyPartitioner(nil).ForTopic(b.topic)
	parts := make([][]*kgo.Record, b.opts.partitions)
	exp, err := workload.Generate(b.wcfg, func(r workload.Record) error {
		rec := toKafka(r)
		rec.Topic = b.topic
		p := part.Partition(rec, b.opts.partitions)
		rec.Partition = int32(p)
		rec.Offset = int64(len(parts[p]))
		parts[p] = append(parts[p], rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if exp.Records != b.exp.Records || exp.Distinct != b.exp.Distinct {
		return nil, fmt.Errorf("the regenerated workload differs from the produced one (%s vs %s)", exp.Summary(), b.exp.Summary())
	}
	for p, recs := range parts {
		if int64(len(recs)) != b.counts[p] {
			progress("warning: b2 puts %d records in partition %d, Kafka has %d: the partitioning differs", len(recs), p, b.counts[p])
		}
	}
	return &b2Data{parts: parts}, nil
}

// runB2 applies the in-memory records with pipeline.Applier.ApplyBatch —
// the worker's transaction — one goroutine per partition, in batches of the
// worker's batch_max_records, on a pool sized and configured as the
// worker's (openPool: max(partitions, 4) + 4 connections, the same session
// settings). No Kafka.
func (b *bench) runB2(ctx context.Context, data *b2Data) (baselineRun, error) {
	def := config.Default()
	ts := def.TopicSettings(b.topic)
	dec, err := event.NewDecoder(event.DecoderConfig{
		Topic: b.topic, Format: ts.Format, KeyStrategy: ts.KeyStrategy, KeyPointer: ts.KeyPointer, NaturalKey: ts.NaturalKey,
		IDPointer: ts.IDPointer, TypePointer: ts.TypePointer, SubjectPointer: ts.SubjectPointer, VersionPointer: ts.VersionPointer,
		MaxPayloadBytes: def.Consumer.MaxPayloadBytes,
	})
	if err != nil {
		return baselineRun{}, err
	}
	group := b.name("b2")
	size := def.Consumer.BatchMaxRecords
	return b.fromMemory(ctx, "b2", group, len(data.parts), func(pool *pgxpool.Pool) partitionFunc {
		applier := pipeline.NewApplier(pool, pipeline.Options{
			Decoders: map[string]*event.Decoder{b.topic: dec},
			Handlers: referenceHandlers(),
		})
		return func(ctx context.Context, p int) (int64, error) {
			recs := data.parts[p]
			for i := 0; i < len(recs); i += size {
				batch := consumer.Batch{Group: group, Topic: b.topic, Partition: int32(p), Records: recs[i:min(i+size, len(recs))]}
				if _, err := applier.ApplyBatch(ctx, batch); err != nil {
					return recs[i].Offset, err
				}
			}
			return 0, nil
		}
	})
}

// partitionFunc applies one partition's records from memory.
type partitionFunc func(ctx context.Context, p int) (int64, error)

// fromMemory makes a fresh schema and a pool like the worker's on it, runs
// apply for each of parts partitions, one goroutine each (the first failure
// cancels the others), times it with its CPU, and checks the schema against
// the expected end state. prepare makes the function that applies one
// partition (it returns the offset it failed at).
func (b *bench) fromMemory(ctx context.Context, kind, group string, parts int, prepare func(pool *pgxpool.Pool) partitionFunc) (baselineRun, error) {
	var r baselineRun
	d, err := b.newDB(ctx, kind, migrateInProcess)
	if err != nil {
		return r, err
	}
	defer d.drop(context.WithoutCancel(ctx))
	pool, err := workerPool(ctx, d, "effectively-bench-"+kind)
	if err != nil {
		return r, err
	}
	defer pool.Close()
	apply := prepare(pool)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	before := takeCPUSnapshot()
	start := time.Now()
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if at, err := apply(ctx, p); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("%s partition %d at offset %d: %w", kind, p, at, err)
				}
				mu.Unlock()
				cancel()
			}
		}()
	}
	wg.Wait()
	r.total = time.Since(start)
	r.steady = r.total
	r.cpu = cpuBetween(before, takeCPUSnapshot())
	if firstErr != nil {
		return r, firstErr
	}
	n, err := d.applied(ctx, group, b.topic)
	if err != nil {
		return r, err
	}
	r.records = n
	if r.problems, err = d.check(ctx, b.exp); err != nil {
		return r, err
	}
	return r, nil
}

// referenceHandlers is the reference domain without side effects, as E runs
// it in the benchmark.
func referenceHandlers() *handlers.Registry {
	reg := &handlers.Registry{}
	accounts.Register(reg)
	return reg
}
