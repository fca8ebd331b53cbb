package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/examples/accounts"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/outbox"
)

// B0 is the database's own limit for E's work: the statements of E's
// transaction, with E's batches, connections and partitions, and nothing
// else — no Kafka, no decoding, no handler code, no Go-side dedupe. Every
// batch is precomputed from the workload (which keys it claims, which of
// them an earlier batch claimed, the rows its new events write), so the
// timed part only sends:
//
//	BEGIN
//	lock the position row                 dedupe.LockPosition
//	claim the batch's distinct keys       dedupe.ClaimAll (INSERT … SELECT FROM unnest … ON CONFLICT DO NOTHING RETURNING)
//	read the hashes of earlier claims     dedupe.Lookup (only when the batch repeats an earlier batch's key)
//	gated upsert into accounts,           handlers.Effects.Flush: one statement per table and shape,
//	insert-once into ledger_entries         exactly as the typed effects build them
//	stale dispositions, position advance  dedupe.QueueDispositions, dedupe.QueueAdvance (one round trip)
//	COMMIT
//
// The statements are the engine's own (the exported dedupe functions and
// handlers.Effects fed with precomputed rows), not copies. What E does on
// top, B0 leaves out: decoding and hashing, handlers, the in-memory claim
// bookkeeping, and the reads of the parking gate and of parked events to
// release (one round trip each per batch that has ledger events or
// account arrivals; this workload never parks).

// b0Data is the workload as B0 sends it: per partition, its batches.
type b0Data struct {
	parts  [][]b0Batch
	events int // records covered (re-sends included)
}

// b0Batch is one batch of the worker's size, ready to send.
type b0Batch struct {
	first, next int64 // offsets: the first record's, and the one after the last
	claims      []dedupe.Claim
	// newKeys is how many of claims no earlier batch claimed: ClaimAll must
	// return exactly these.
	newKeys int
	taken   []string // claimed by an earlier batch: the lookup reads them
	rows    []b0Row  // the newly claimed events' effects, in offset order
}

// b0Row is one event's typed effect.
type b0Row struct {
	key     string
	offset  int64
	upsert  bool // accounts (gated upsert), else ledger_entries (insert-once)
	version int64
	values  []any
}

// b0Precompute decodes and parses the in-memory records once (untimed) and
// cuts them into the worker's batches, settling in memory what E settles in
// memory: repeats within a batch, and which keys an earlier batch claimed.
func (b *bench) b0Precompute(data *b2Data) (*b0Data, error) {
	def := config.Default()
	ts := def.TopicSettings(b.topic)
	dec, err := event.NewDecoder(event.DecoderConfig{
		Topic: b.topic, Format: ts.Format, KeyStrategy: ts.KeyStrategy, KeyPointer: ts.KeyPointer, NaturalKey: ts.NaturalKey,
		IDPointer: ts.IDPointer, TypePointer: ts.TypePointer, SubjectPointer: ts.SubjectPointer, VersionPointer: ts.VersionPointer,
		MaxPayloadBytes: def.Consumer.MaxPayloadBytes,
	})
	if err != nil {
		return nil, err
	}
	size := def.Consumer.BatchMaxRecords
	out := &b0Data{parts: make([][]b0Batch, len(data.parts))}
	interned := map[string]string{}
	intern := func(s string) string {
		if v, ok := interned[s]; ok {
			return v
		}
		interned[s] = s
		return s
	}
	claimed := map[string]bool{}
	exists := map[string]bool{} // accounts created by an earlier event
	for p, recs := range data.parts {
		for i := 0; i < len(recs); i += size {
			chunk := recs[i:min(i+size, len(recs))]
			bt := b0Batch{first: chunk[0].Offset, next: chunk[len(chunk)-1].Offset + 1}
			inBatch := map[string]bool{}
			for _, r := range chunk {
				hs := make([]event.Header, len(r.Headers))
				for j, h := range r.Headers {
					hs[j] = event.Header{Key: h.Key, Value: h.Value}
				}
				ev, err := dec.Decode(event.Record{
					Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
					Key: r.Key, Value: r.Value, Headers: hs, Timestamp: r.Timestamp,
				})
				if err != nil {
					return nil, fmt.Errorf("b0: decoding %d/%d: %w", r.Partition, r.Offset, err)
				}
				if inBatch[ev.Key] {
					continue // a repeat within the batch: settled in memory
				}
				inBatch[ev.Key] = true
				// Copies, so that a claim does not keep the decoded event
				// (its data included) alive for the whole benchmark.
				c := dedupe.Claim{
					Key: strings.Clone(ev.Key), Strategy: intern(ev.Strategy), PayloadHash: bytes.Clone(ev.PayloadHash[:]),
					Type: intern(ev.Type), Subject: strings.Clone(ev.Subject), Topic: b.topic, Partition: int32(p), Offset: r.Offset,
				}
				bt.claims = append(bt.claims, c)
				if claimed[c.Key] {
					bt.taken = append(bt.taken, c.Key)
					continue
				}
				claimed[c.Key] = true
				bt.newKeys++
				row := b0Row{key: c.Key, offset: r.Offset}
				switch ev.Type {
				case accounts.TypeAccountOpened, accounts.TypeAccountUpdated, accounts.TypeAccountClosed:
					s, err := accounts.ParseAccount(ev)
					if err != nil {
						return nil, fmt.Errorf("b0: %s at %d/%d: %w", ev.Type, r.Partition, r.Offset, err)
					}
					status := "open"
					if ev.Type == accounts.TypeAccountClosed {
						status = "closed"
					}
					row.upsert, row.version = true, ev.Version
					row.values = []any{c.Subject, s.Name, s.Email, intern(s.Plan), status}
					exists[c.Subject] = true
				case accounts.TypeLedgerCredited, accounts.TypeLedgerDebited:
					if !exists[ev.Subject] {
						// E would park it; B0 has no parking.
						return nil, fmt.Errorf("b0: %s %s at %d/%d precedes its account: the workload parks, which B0 does not model", ev.Type, ev.Key, r.Partition, r.Offset)
					}
					l, err := accounts.ParseLedger(ev)
					if err != nil {
						return nil, fmt.Errorf("b0: %s at %d/%d: %w", ev.Type, r.Partition, r.Offset, err)
					}
					row.values = []any{c.Key, c.Subject, intern(l.Currency), l.AmountCents, c.Type}
				default:
					return nil, fmt.Errorf("b0: unexpected event type %s at %d/%d", ev.Type, r.Partition, r.Offset)
				}
				bt.rows = append(bt.rows, row)
			}
			out.parts[p] = append(out.parts[p], bt)
			out.events += len(chunk)
		}
	}
	return out, nil
}

// workerPool opens a pool on d sized and configured as the worker's
// (openPool: max(partitions, 4) + 4 connections, the same session settings).
func workerPool(ctx context.Context, d *db, app string) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		return nil, err
	}
	rp := pcfg.ConnConfig.RuntimeParams
	rp["lock_timeout"] = "10s"
	rp["statement_timeout"] = "60s"
	rp["idle_in_transaction_session_timeout"] = "30s"
	rp["application_name"] = app
	// The worker calls openPool with 0 partitions: max(0, 4) + 4.
	pcfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// runB0 sends the precomputed batches, one goroutine per partition, on a
// pool like the worker's, and checks the result as B2's is checked.
func (b *bench) runB0(ctx context.Context, data *b0Data) (baselineRun, error) {
	// A registry of its own per run: the tables resolve against this
	// schema on the first Flush, as the worker's do on its first batch.
	env := handling.Of(referenceHandlers()).Env(nil, outbox.Expiry{}, nil, 0)
	group := b.name("b0")
	return b.fromMemory(ctx, "b0", group, len(data.parts), func(pool *pgxpool.Pool) partitionFunc {
		gens := dedupe.NewGenerations(pool)
		return func(ctx context.Context, p int) (int64, error) {
			gen, err := gens.Open(ctx, pool)
			if err != nil {
				return 0, err
			}
			for _, bt := range data.parts[p] {
				if err := b0Send(ctx, pool, env, gen, group, b.topic, int32(p), bt); err != nil {
					return bt.first, err
				}
			}
			return 0, nil
		}
	})
}

// b0Send is one batch's transaction.
func b0Send(ctx context.Context, pool *pgxpool.Pool, env handlers.Env, gen int32, group, topic string, partition int32, bt b0Batch) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := dedupe.LockPosition(ctx, tx, group, topic, partition, bt.first); err != nil {
		return err
	}
	got, err := dedupe.ClaimAll(ctx, tx, gen, group, bt.claims)
	if err != nil {
		return err
	}
	if len(got) != bt.newKeys {
		return fmt.Errorf("claimed %d keys, want %d", len(got), bt.newKeys)
	}
	if _, err := dedupe.Lookup(ctx, tx, bt.taken); err != nil {
		return err
	}
	eff := handling.NewEffects(env)
	outs := make([]*handling.Outcome, len(bt.rows))
	for i, row := range bt.rows {
		outs[i] = eff.Begin(handlers.Origin{Group: group, Topic: topic, Partition: partition, Offset: row.offset}, event.Event{Key: row.key})
		if row.upsert {
			err = eff.Effects().Upsert(accounts.Accounts, row.version, row.values...)
		} else {
			err = eff.Effects().InsertOnce(accounts.LedgerEntries, row.values...)
		}
		if err != nil {
			return err
		}
	}
	if err := eff.Flush(ctx, tx); err != nil {
		return err
	}
	var keys []string
	var disps []dedupe.Disposition
	for i, o := range outs {
		if o.Err != nil {
			return fmt.Errorf("event %s: %w", bt.rows[i].key, o.Err)
		}
		if o.Disposition != dedupe.Applied {
			keys = append(keys, bt.rows[i].key)
			disps = append(disps, o.Disposition)
		}
	}
	rec := &pgx.Batch{}
	dedupe.QueueDispositions(rec, keys, disps)
	dedupe.QueueAdvance(rec, group, topic, partition, bt.next)
	if err := tx.SendBatch(ctx, rec).Close(); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
