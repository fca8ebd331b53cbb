package deadletter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// topicCursors are one dead-letter topic's cursors, as reconciliation sets
// them.
type topicCursors struct {
	topic      string
	partitions []int32
	offsets    []int64
}

// prepare readies dlq for this session's first publish to it: the topic
// exists, every partition has a cursor, and whatever an earlier relay
// published there without marking it is marked now. It runs after the
// session fenced earlier producers, so what it reads is final.
func (s *session) prepare(ctx context.Context, dlq, source string) error {
	partitions, err := s.ensureTopic(ctx, dlq, source)
	if err != nil {
		return err
	}
	starts, ends, err := s.bounds(ctx, dlq, partitions)
	if err != nil {
		return err
	}
	cursors, err := s.cursors(ctx, dlq)
	if err != nil {
		return err
	}

	// A partition without a cursor never received a record from a relay
	// of this schema (the cursor is written before the first publish to
	// it): there is nothing to read back there.
	from := map[int32]int64{}
	for p := range partitions {
		cur, ok := cursors[p]
		if !ok {
			continue
		}
		start := cur
		if cur > ends[p] {
			// The topic was deleted and recreated: anything this relay
			// wrote to the new one is above its log start.
			s.r.log.Warn("dead-letter topic partition is behind its cursor; was the topic recreated? reading it from the start",
				zap.String("dlq_topic", dlq), zap.Int32("partition", p),
				zap.Int64("cursor", cur), zap.Int64("end_offset", ends[p]))
			start = starts[p]
		}
		if start < starts[p] {
			if start < ends[p] {
				s.r.log.Warn("dead-letter records were deleted before they were reconciled; unmarked dead letters among them will be published again",
					zap.String("dlq_topic", dlq), zap.Int32("partition", p),
					zap.Int64("cursor", start), zap.Int64("log_start_offset", starts[p]))
			}
			start = starts[p]
		}
		if start < ends[p] {
			from[p] = start
		}
	}

	found, scanned, err := s.scan(ctx, dlq, from, ends)
	if err != nil {
		return err
	}
	tc := &topicCursors{topic: dlq}
	for p := range partitions {
		tc.partitions = append(tc.partitions, p)
		tc.offsets = append(tc.offsets, ends[p])
	}
	marked, err := s.mark(ctx, found, tc)
	if err != nil {
		return err
	}
	s.topics[dlq] = partitions
	if marked > 0 {
		s.r.log.Info("marked dead letters an interrupted relay had published",
			zap.String("dlq_topic", dlq), zap.Int64("dead_letters", marked))
	}
	s.r.log.Debug("dead-letter topic reconciled", zap.String("dlq_topic", dlq),
		zap.Int32("partitions", partitions), zap.Int("records_read", scanned), zap.Int64("dead_letters_marked", marked))
	return nil
}

// ensureTopic returns dlq's partition count, creating it first if missing
// (with source's partition count, or 1 when source is gone, and the
// broker's default replication factor).
func (s *session) ensureTopic(ctx context.Context, dlq, source string) (int32, error) {
	// The request bound plus the wait for a source the metadata does not
	// serve: a short RequestTimeout must not cut that wait, every time.
	ctx, cancel := context.WithTimeout(ctx, s.r.opts.RequestTimeout+sourceGoneAfter)
	defer cancel()
	tds, err := s.adm.ListTopics(ctx, dlq)
	if err != nil {
		return 0, fmt.Errorf("describing dead-letter topic %s: %w", dlq, err)
	}
	td := tds[dlq]
	switch {
	case td.Err == nil && len(td.Partitions) > 0:
		return int32(len(td.Partitions)), nil
	case td.Err != nil && !errors.Is(td.Err, kerr.UnknownTopicOrPartition):
		return 0, fmt.Errorf("describing dead-letter topic %s: %w", dlq, td.Err)
	}

	partitions, err := s.sourcePartitions(ctx, source)
	if err != nil {
		return 0, fmt.Errorf("describing topic %s, whose dead-letter topic %s is missing: %w", source, dlq, err)
	}
	resp, err := s.adm.CreateTopic(ctx, partitions, -1, nil, dlq)
	if err == nil {
		err = resp.Err
	}
	switch {
	case err == nil:
		s.r.log.Info("created dead-letter topic", zap.String("dlq_topic", dlq),
			zap.String("topic", source), zap.Int32("partitions", partitions))
	case errors.Is(err, kerr.TopicAlreadyExists):
	default:
		return 0, fmt.Errorf("creating dead-letter topic %s: %w", dlq, err)
	}

	// A new topic takes a moment to have leaders everywhere.
	for {
		tds, err := s.adm.ListTopics(ctx, dlq)
		if err == nil {
			err = tds[dlq].Err
		}
		if err == nil && ready(tds[dlq]) {
			return int32(len(tds[dlq].Partitions)), nil
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return 0, fmt.Errorf("waiting for dead-letter topic %s to be ready: %w", dlq, errors.Join(ctx.Err(), err))
		}
	}
}

// sourceGoneAfter is how long the metadata must keep saying a source topic
// does not exist before its dead-letter topic is created with one
// partition. A topic created a moment ago can be unknown to the broker that
// answers (CI saw it), and a dead-letter topic created with the wrong count
// keeps it.
const sourceGoneAfter = 2 * time.Second

// sourcePartitions returns source's partition count, or 1 when the source
// is gone. Any other failure to describe it (a timeout, a leader election
// on a young topic) is returned and retried by the caller's next pass.
func (s *session) sourcePartitions(ctx context.Context, source string) (int32, error) {
	var unknownSince time.Time
	for {
		sds, err := s.adm.ListTopics(ctx, source)
		if err != nil {
			return 0, err
		}
		switch sd := sds[source]; {
		case sd.Err == nil && len(sd.Partitions) > 0:
			return int32(len(sd.Partitions)), nil
		case errors.Is(sd.Err, kerr.UnknownTopicOrPartition):
			if unknownSince.IsZero() {
				unknownSince = time.Now()
			}
			if time.Since(unknownSince) >= sourceGoneAfter {
				return 1, nil
			}
		case sd.Err != nil:
			return 0, sd.Err
		default:
			return 0, errors.New("no partitions listed yet")
		}
		if !sleep(ctx, 250*time.Millisecond) {
			return 0, fmt.Errorf("the metadata says it does not exist; asked again until: %w", ctx.Err())
		}
	}
}

func ready(td kadm.TopicDetail) bool {
	if len(td.Partitions) == 0 {
		return false
	}
	for _, p := range td.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

// bounds returns each partition's log start offset and high watermark. The
// high watermark, not the last stable offset: a record of ours committed
// behind someone else's open transaction is above the latter, and the
// read_committed scan waits for that transaction to end instead.
func (s *session) bounds(ctx context.Context, dlq string, partitions int32) (starts, ends map[int32]int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.r.opts.RequestTimeout)
	defer cancel()
	for {
		if starts, ends, err = s.tryBounds(ctx, dlq, partitions); err == nil {
			return starts, ends, nil
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return nil, nil, fmt.Errorf("listing the offsets of dead-letter topic %s: %w", dlq, err)
		}
	}
}

func (s *session) tryBounds(ctx context.Context, dlq string, partitions int32) (starts, ends map[int32]int64, err error) {
	hwms, err := s.adm.ListEndOffsets(ctx, dlq)
	if err != nil {
		return nil, nil, err
	}
	logStarts, err := s.adm.ListStartOffsets(ctx, dlq)
	if err != nil {
		return nil, nil, err
	}
	starts, ends = map[int32]int64{}, map[int32]int64{}
	for p := range partitions {
		end, ok := hwms.Lookup(dlq, p)
		start, ok2 := logStarts.Lookup(dlq, p)
		switch {
		case !ok || !ok2:
			return nil, nil, fmt.Errorf("partition %d not listed", p)
		case end.Err != nil:
			return nil, nil, end.Err
		case start.Err != nil:
			return nil, nil, start.Err
		}
		starts[p], ends[p] = start.Offset, end.Offset
	}
	return starts, ends, nil
}

const selectCursorsSQL = `SELECT "partition", next_offset FROM dead_letter_relay_cursors WHERE dlq_topic = $1`

func (s *session) cursors(ctx context.Context, dlq string) (map[int32]int64, error) {
	rows, err := s.conn.Query(ctx, selectCursorsSQL, dlq)
	if err != nil {
		return nil, fmt.Errorf("reading the relay cursors of %s: %w", dlq, err)
	}
	defer rows.Close()
	out := map[int32]int64{}
	for rows.Next() {
		var p int32
		var o int64
		if err := rows.Scan(&p, &o); err != nil {
			return nil, fmt.Errorf("reading the relay cursors of %s: %w", dlq, err)
		}
		out[p] = o
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the relay cursors of %s: %w", dlq, err)
	}
	return out, nil
}

// scan reads dlq's partitions from from[p] up to ends[p] (high watermarks)
// as a read_committed consumer sees them, and returns the dead letters it
// finds there and how many records it read.
func (s *session) scan(ctx context.Context, dlq string, from, ends map[int32]int64) ([]published, int, error) {
	if len(from) == 0 {
		return nil, 0, nil
	}
	offsets := make(map[int32]kgo.Offset, len(from))
	remaining := make(map[int32]bool, len(from))
	for p, o := range from {
		offsets[p] = kgo.NewOffset().At(o)
		remaining[p] = true
	}
	cl, err := kgo.NewClient(s.r.clientOpts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{dlq: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// The last offset below the high watermark holds a record that is
		// committed, a transaction marker, or one whose transaction will
		// end with a marker above it (an aborted record is filtered out,
		// its abort marker is not). Keeping the markers, which are control
		// records, is how the scan sees an offset at or past end-1 and
		// knows it has read everything.
		kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)...)
	if err != nil {
		return nil, 0, fmt.Errorf("creating a reader of dead-letter topic %s: %w", dlq, err)
	}
	defer cl.Close()

	ctx, cancel := context.WithTimeout(ctx, s.r.opts.RequestTimeout)
	defer cancel()
	var (
		found   []published
		scanned int
	)
	for len(remaining) > 0 {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, 0, fmt.Errorf("reading back dead-letter topic %s: %d partitions not read to their end: %w", dlq, len(remaining), ctx.Err())
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("reading back dead-letter topic %s partition %d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return nil, 0, ferr
		}
		fetches.EachRecord(func(rec *kgo.Record) {
			end := ends[rec.Partition]
			if rec.Offset >= end-1 {
				delete(remaining, rec.Partition)
			}
			if rec.Offset >= end || rec.Attrs.IsControl() {
				return
			}
			scanned++
			if p, ok := parsePublished(rec); ok {
				found = append(found, p)
			}
		})
	}
	return found, scanned, nil
}

// parsePublished reads the dead letter a published record carries. The
// relay's headers come after the original record's, so the last of each
// key is the relay's.
func parsePublished(rec *kgo.Record) (published, bool) {
	var id, topic, partition, offset string
	for _, h := range rec.Headers {
		switch h.Key {
		case HeaderDeadLetterID:
			id = string(h.Value)
		case HeaderOriginTopic:
			topic = string(h.Value)
		case HeaderOriginPartition:
			partition = string(h.Value)
		case HeaderOriginOffset:
			offset = string(h.Value)
		}
	}
	p := published{topic: topic, dlqTopic: rec.Topic, dlqPartition: rec.Partition, dlqOffset: rec.Offset}
	var err1, err2, err3 error
	p.id, err1 = strconv.ParseInt(id, 10, 64)
	part, err2 := strconv.ParseInt(partition, 10, 32)
	p.offset, err3 = strconv.ParseInt(offset, 10, 64)
	p.partition = int32(part)
	return p, topic != "" && err1 == nil && err2 == nil && err3 == nil
}
