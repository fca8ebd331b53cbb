package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kzap"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/internal/dedupe"
)

// What the audit finds for a record. The first four are the dispositions a
// claim or a dead letter records; Duplicate, Pruned and NotProcessed are
// derived; Unaccounted is a record nothing explains.
const (
	Applied      = "applied"
	Stale        = "stale"
	Parked       = "parked"
	DeadLettered = "dead_lettered"
	Duplicate    = "duplicate"
	// Skipped: a record that is no event (a change-data-capture
	// tombstone), acknowledged with no effect.
	Skipped      = "skipped"
	Pruned       = "pruned"
	NotProcessed = "not_processed"
	Unaccounted  = "unaccounted"
)

// Outcomes are the audit's findings in the order they are printed.
var Outcomes = []string{Applied, Stale, Parked, DeadLettered, Duplicate, Skipped, Pruned, NotProcessed, Unaccounted}

// DB runs the audit's queries: a pool or a connection.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Options configure an audit.
type Options struct {
	// Brokers are the seed brokers.
	Brokers []string
	// Topic is the topic audited.
	Topic string
	// Group is the consumer group whose stored positions (consumer_offsets)
	// say which records have been processed.
	Group string
	// From and To bound the range by record timestamp: from the first
	// record at or after From to the last before To. Zero means the log
	// start and the end (the last stable offset when the audit starts).
	From, To time.Time
	// Decoder is the worker's decoder of Topic: keys must be derived as
	// the worker derives them.
	Decoder *event.Decoder
	// MaxListed bounds the unaccounted records listed (default 100; they
	// are all counted).
	MaxListed int
	// ChunkSize is how many records are looked up together (default 5,000).
	ChunkSize int
	// IdleTimeout ends the audit with an error when no record arrives for
	// this long before the range is read (default 30 s).
	IdleTimeout time.Duration
	// Logger receives franz-go's warnings.
	Logger *zap.Logger
	// ProgressFunc, when set, is called after each chunk with the records
	// audited so far and the offsets in the range (an upper bound: offsets
	// have gaps).
	ProgressFunc func(audited, offsets int64)
	// ExtraOpts are appended to the franz-go options (TLS, SASL, tests).
	ExtraOpts []kgo.Opt
}

func (o *Options) setDefaults() {
	if o.MaxListed <= 0 {
		o.MaxListed = 100
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = 5000
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
}

// Range is one partition's audited offsets.
type Range struct {
	Partition int32 `json:"partition"`
	// From is the first offset audited, To the end (exclusive).
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Position is the group's stored next offset (-1: none stored).
	Position int64 `json:"position"`
	// PrunedThrough is the highest origin offset of a pruned claim or
	// dead letter (-1: nothing pruned).
	PrunedThrough int64 `json:"pruned_through"`
	// Records is the number of records read (offsets have gaps: markers of
	// transactions, compaction).
	Records int64 `json:"records"`
}

// Record is an unaccounted record.
type Record struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// Key is the record key.
	Key string `json:"key"`
	// EventKey is the dedupe key ("" when the record does not decode).
	EventKey string `json:"event_key,omitempty"`
	// Problem says what is missing.
	Problem string `json:"problem"`
}

// Report is the audit's result.
type Report struct {
	Topic      string     `json:"topic"`
	Group      string     `json:"group"`
	From       *time.Time `json:"from_time,omitempty"`
	To         *time.Time `json:"to_time,omitempty"`
	Partitions []Range    `json:"partitions"`
	// Records is the number of records read.
	Records int64 `json:"records"`
	// Counts has every outcome of Outcomes (zero included).
	Counts map[string]int64 `json:"counts"`
	// DeadLetterReasons counts the dead-lettered records by reason.
	DeadLetterReasons map[string]int64 `json:"dead_letter_reasons"`
	// Redriven counts dead-lettered records an operator redrove since.
	Redriven int64 `json:"redriven"`
	// Unaccounted lists the first MaxListed unaccounted records by
	// partition and offset; Counts[Unaccounted] has them all.
	Unaccounted []Record `json:"unaccounted"`
	// Took is the audit's duration.
	Took time.Duration `json:"took_ns"`
}

// Clean reports whether every record is accounted for.
func (r Report) Clean() bool { return r.Counts[Unaccounted] == 0 }

// auditor is one audit in progress.
type auditor struct {
	db   DB
	opts Options
	rep  *Report
	pos  map[int32]dedupe.Position
	// pending are records below the position that neither a dead letter
	// nor a claim explains; at the end they are pruned or unaccounted.
	pending []Record
}

// Run audits the topic range opts describes against db.
func Run(ctx context.Context, db DB, opts Options) (Report, error) {
	opts.setDefaults()
	if opts.Decoder == nil {
		return Report{}, errors.New("audit: no decoder for topic " + opts.Topic)
	}
	start := time.Now()
	rep := Report{Topic: opts.Topic, Group: opts.Group, Counts: map[string]int64{}, DeadLetterReasons: map[string]int64{}}
	for _, o := range Outcomes {
		rep.Counts[o] = 0
	}
	if !opts.From.IsZero() {
		rep.From = &opts.From
	}
	if !opts.To.IsZero() {
		rep.To = &opts.To
	}

	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(opts.Brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers come through too: the last offset below the
		// end may be one, and seeing it is how a partition is known done.
		kgo.KeepControlRecords(),
		kgo.WithLogger(kzap.New(opts.Logger.Named("kafka"), kzap.Level(kgo.LogLevelWarn))),
	}, opts.ExtraOpts...)...)
	if err != nil {
		return rep, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ranges, err := topicRanges(ctx, kadm.NewClient(cl), opts)
	if err != nil {
		return rep, err
	}

	// Positions first: a record below a position read now was processed
	// before anything read later (its dead letter or claim committed with
	// the position).
	parts := make([]int32, len(ranges))
	for i, r := range ranges {
		parts[i] = r.Partition
	}
	pos, err := dedupe.Positions(ctx, db, opts.Group, opts.Topic, parts)
	if err != nil {
		return rep, err
	}
	a := &auditor{db: db, opts: opts, rep: &rep, pos: pos}
	if err := a.read(ctx, cl, ranges); err != nil {
		return rep, err
	}

	// The watermarks last: the pruner moves them in the same transaction
	// as each deletion, so every deletion the lookups missed shows here.
	pruned, err := dedupe.PrunedOffsets(ctx, db, opts.Topic)
	if err != nil {
		return rep, err
	}
	a.settlePending(pruned)
	for i := range ranges {
		p := ranges[i].Partition
		ranges[i].Position, ranges[i].PrunedThrough = -1, -1
		if s, ok := pos[p]; ok {
			ranges[i].Position = s.Next
		}
		if n, ok := pruned[p]; ok {
			ranges[i].PrunedThrough = n
		}
	}
	rep.Partitions = ranges
	rep.Took = time.Since(start)
	return rep, nil
}

// topicRanges lists each partition's range: the log start (or the first
// offset at From) up to the last stable offset (or the first offset at To).
func topicRanges(ctx context.Context, adm *kadm.Client, opts Options) ([]Range, error) {
	list := func(what string, fn func(context.Context, ...string) (kadm.ListedOffsets, error)) (map[int32]int64, error) {
		lo, err := fn(ctx, opts.Topic)
		if err == nil {
			err = lo.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("listing the %s offsets of topic %s: %w; fix: check kafka.brokers and that the topic exists", what, opts.Topic, err)
		}
		out := map[int32]int64{}
		lo.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
		if len(out) == 0 {
			return nil, fmt.Errorf("topic %s does not exist or has no partitions; fix: pass an existing topic to --topic", opts.Topic)
		}
		return out, nil
	}
	starts, err := list("start", adm.ListStartOffsets)
	if err != nil {
		return nil, err
	}
	ends, err := list("last stable", adm.ListCommittedOffsets)
	if err != nil {
		return nil, err
	}
	if !opts.From.IsZero() {
		from, err := list("from-time", func(ctx context.Context, t ...string) (kadm.ListedOffsets, error) {
			return adm.ListOffsetsAfterMilli(ctx, opts.From.UnixMilli(), t...)
		})
		if err != nil {
			return nil, err
		}
		for p, o := range from {
			starts[p] = max(starts[p], o)
		}
	}
	if !opts.To.IsZero() {
		to, err := list("to-time", func(ctx context.Context, t ...string) (kadm.ListedOffsets, error) {
			return adm.ListOffsetsAfterMilli(ctx, opts.To.UnixMilli(), t...)
		})
		if err != nil {
			return nil, err
		}
		for p, o := range to {
			ends[p] = min(ends[p], o)
		}
	}
	var out []Range
	for p, s := range starts {
		out = append(out, Range{Partition: p, From: s, To: max(s, ends[p])})
	}
	slices.SortFunc(out, func(a, b Range) int { return int(a.Partition - b.Partition) })
	return out, nil
}

// read consumes every range and audits its records chunk by chunk.
func (a *auditor) read(ctx context.Context, cl *kgo.Client, ranges []Range) error {
	offsets := map[int32]kgo.Offset{}
	idx := map[int32]int{}
	var span int64
	for i, r := range ranges {
		idx[r.Partition] = i
		if r.From < r.To {
			offsets[r.Partition] = kgo.NewOffset().At(r.From)
			span += r.To - r.From
		}
	}
	if len(offsets) == 0 {
		return nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{a.opts.Topic: offsets})
	// reading are the partitions not yet read to their end. A partition is
	// done at the first record (a transaction marker included) at or past
	// its last offset; offsets may have gaps, never the last one below the
	// end (the last stable offset) unless compaction removed it.
	reading := map[int32]bool{}
	for p := range offsets {
		reading[p] = true
	}
	chunk := make([]*kgo.Record, 0, a.opts.ChunkSize)
	lastRecord := time.Now()
	for len(reading) > 0 {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollRecords(pctx, a.opts.ChunkSize)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && ferr == nil {
				ferr = fmt.Errorf("reading %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		got := false
		fetches.EachRecord(func(r *kgo.Record) {
			if !reading[r.Partition] {
				return
			}
			got = true
			rg := &ranges[idx[r.Partition]]
			if r.Offset >= rg.To-1 {
				delete(reading, r.Partition)
				cl.PauseFetchPartitions(map[string][]int32{a.opts.Topic: {r.Partition}})
			}
			if r.Offset >= rg.To || r.Attrs.IsControl() {
				return
			}
			rg.Records++
			chunk = append(chunk, r)
		})
		if len(chunk) >= a.opts.ChunkSize || (len(reading) == 0 && len(chunk) > 0) {
			if err := a.audit(ctx, chunk); err != nil {
				return err
			}
			chunk = chunk[:0]
			if a.opts.ProgressFunc != nil {
				a.opts.ProgressFunc(a.rep.Records, span)
			}
		}
		if got {
			lastRecord = time.Now()
		} else if time.Since(lastRecord) > a.opts.IdleTimeout {
			var stuck []string
			for p := range reading {
				stuck = append(stuck, fmt.Sprintf("%d (to offset %d)", p, ranges[idx[p]].To))
			}
			slices.Sort(stuck)
			return fmt.Errorf("no record for %s while partitions %v of %s were not read to their end; the broker may be unavailable, or the records were deleted meanwhile (topic retention)",
				a.opts.IdleTimeout, stuck, a.opts.Topic)
		}
	}
	return nil
}

// decoded is a record of a chunk with its event (or decode error).
type decoded struct {
	rec *kgo.Record
	ev  event.Event
	err error
}

// decodeAll decodes a chunk on every core.
func (a *auditor) decodeAll(ctx context.Context, recs []*kgo.Record) ([]decoded, error) {
	out := make([]decoded, len(recs))
	workers := min(runtime.GOMAXPROCS(0), max(1, len(recs)/256))
	var wg sync.WaitGroup
	per := (len(recs) + workers - 1) / workers
	for w := range workers {
		lo, hi := w*per, min(len(recs), (w+1)*per)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				r := recs[i]
				hs := make([]event.Header, len(r.Headers))
				for j, h := range r.Headers {
					hs[j] = event.Header{Key: h.Key, Value: h.Value}
				}
				out[i].rec = r
				out[i].ev, out[i].err = a.opts.Decoder.DecodeContext(ctx, event.Record{
					Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
					Key: r.Key, Value: r.Value, Headers: hs, Timestamp: r.Timestamp,
				})
			}
		}()
	}
	wg.Wait()
	for _, d := range out {
		// The registry not answering says nothing of the record.
		if errors.Is(d.err, event.ErrSchemaRegistryUnavailable) {
			return nil, d.err
		}
	}
	return out, nil
}

// origin is a record's place in the topic.
type origin struct {
	partition int32
	offset    int64
}

type deadLetter struct {
	reason   string
	redriven bool
}

type claim struct {
	topic       string
	origin      origin
	disposition string
	hash        []byte
}

const deadLettersSQL = `
SELECT d."partition", d."offset", d.reason, d.resolved_at IS NOT NULL
FROM unnest($2::integer[], $3::bigint[]) AS o(p, off)
JOIN dead_letters d ON d.topic = $1 AND d."partition" = o.p AND d."offset" = o.off`

const claimsSQL = `
SELECT event_key, topic, "partition", "offset", disposition, payload_hash
FROM effectively_claims WHERE event_key = ANY($1)`

// audit explains one chunk of records: two queries, whatever its size.
func (a *auditor) audit(ctx context.Context, recs []*kgo.Record) error {
	items, err := a.decodeAll(ctx, recs)
	if err != nil {
		return err
	}
	var parts []int32
	var offs []int64
	var keys []string
	seen := map[string]bool{}
	for _, it := range items {
		a.rep.Records++
		if !a.processed(it.rec) {
			continue
		}
		parts = append(parts, it.rec.Partition)
		offs = append(offs, it.rec.Offset)
		if it.err == nil && !seen[it.ev.Key] {
			seen[it.ev.Key] = true
			keys = append(keys, it.ev.Key)
		}
	}
	dls := map[origin]deadLetter{}
	if len(parts) > 0 {
		rows, err := a.db.Query(ctx, deadLettersSQL, a.opts.Topic, parts, offs)
		if err != nil {
			return fmt.Errorf("looking up the dead letters of %d records: %w", len(parts), err)
		}
		var o origin
		var dl deadLetter
		if _, err := pgx.ForEachRow(rows, []any{&o.partition, &o.offset, &dl.reason, &dl.redriven}, func() error {
			dls[o] = dl
			return nil
		}); err != nil {
			return fmt.Errorf("looking up the dead letters of %d records: %w", len(parts), err)
		}
	}

	claims := make(map[string]claim, len(keys))
	if len(keys) > 0 {
		rows, err := a.db.Query(ctx, claimsSQL, keys)
		if err != nil {
			return fmt.Errorf("looking up the claims of %d event keys: %w", len(keys), err)
		}
		var k string
		var c claim
		if _, err := pgx.ForEachRow(rows, []any{&k, &c.topic, &c.origin.partition, &c.origin.offset, &c.disposition, &c.hash}, func() error {
			c.hash = bytes.Clone(c.hash)
			claims[k] = c
			return nil
		}); err != nil {
			return fmt.Errorf("looking up the claims of %d event keys: %w", len(keys), err)
		}
	}

	for _, it := range items {
		a.classify(it, dls, claims)
	}
	return nil
}

// processed reports whether the group's stored position is past r.
func (a *auditor) processed(r *kgo.Record) bool {
	s, ok := a.pos[r.Partition]
	return ok && r.Offset < s.Next
}

func (a *auditor) classify(it decoded, dls map[origin]deadLetter, claims map[string]claim) {
	r := it.rec
	if !a.processed(r) {
		a.rep.Counts[NotProcessed]++
		return
	}
	if event.IsSkip(it.err) {
		a.rep.Counts[Skipped]++
		return
	}
	o := origin{r.Partition, r.Offset}
	if dl, ok := dls[o]; ok {
		a.rep.Counts[DeadLettered]++
		a.rep.DeadLetterReasons[dl.reason]++
		if dl.redriven {
			a.rep.Redriven++
		}
		return
	}
	rec := Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: printable(r.Key)}
	if it.err != nil {
		rec.Problem = fmt.Sprintf("does not decode (%s) and has no dead letter", reasonOf(it.err))
		a.pending = append(a.pending, rec)
		return
	}
	rec.EventKey = it.ev.Key
	c, ok := claims[it.ev.Key]
	switch {
	case !ok:
		rec.Problem = "no claim of its event key and no dead letter"
	case c.topic == r.Topic && c.origin == o:
		switch c.disposition {
		case Applied, Stale, Parked:
			a.rep.Counts[c.disposition]++
			return
		default:
			rec.Problem = fmt.Sprintf("its claim says %s but it has no dead letter", c.disposition)
		}
	case bytes.Equal(c.hash, it.ev.PayloadHash[:]):
		a.rep.Counts[Duplicate]++
		return
	default:
		rec.Problem = fmt.Sprintf("its event key was claimed by %s/%d@%d with a different payload, and it has no conflict dead letter",
			c.topic, c.origin.partition, c.origin.offset)
	}
	a.pending = append(a.pending, rec)
}

// settlePending decides the records nothing explained: pruned when at or
// below their partition's pruned watermark — or when another record of the
// same event key is (its claim was pruned after this duplicate was
// processed) — unaccounted otherwise.
func (a *auditor) settlePending(pruned map[int32]int64) {
	below := func(r Record) bool {
		w, ok := pruned[r.Partition]
		return ok && r.Offset <= w
	}
	prunedKeys := map[string]bool{}
	for _, r := range a.pending {
		if r.EventKey != "" && below(r) {
			prunedKeys[r.EventKey] = true
		}
	}
	var unaccounted []Record
	for _, r := range a.pending {
		if below(r) || (r.EventKey != "" && prunedKeys[r.EventKey]) {
			a.rep.Counts[Pruned]++
			continue
		}
		a.rep.Counts[Unaccounted]++
		unaccounted = append(unaccounted, r)
	}
	slices.SortFunc(unaccounted, func(x, y Record) int {
		if x.Partition != y.Partition {
			return int(x.Partition - y.Partition)
		}
		return int(x.Offset - y.Offset)
	})
	a.rep.Unaccounted = unaccounted[:min(len(unaccounted), a.opts.MaxListed)]
	if a.rep.Unaccounted == nil {
		a.rep.Unaccounted = []Record{}
	}
	a.pending = nil
}

func reasonOf(err error) string {
	if r := event.ReasonOf(err); r != "" {
		return string(r)
	}
	return err.Error()
}

// printable renders a record key for a listing: as text when it is short
// valid UTF-8 without control characters, else as hex.
func printable(b []byte) string {
	const maxLen = 80
	s := string(b)
	ok := len(b) <= maxLen
	for _, r := range s {
		if r == 0xFFFD || r < 0x20 || r == 0x7f {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	if len(b) > maxLen/2 {
		return fmt.Sprintf("0x%x…", b[:maxLen/2])
	}
	return fmt.Sprintf("0x%x", b)
}
