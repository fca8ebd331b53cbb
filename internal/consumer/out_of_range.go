package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	settings "github.com/effectively-io/effectively/consumer"
)

// outOfRange handles an OFFSET_OUT_OF_RANGE fetch error: the partition's
// position is below its log start (records deleted before this group
// processed them: retention, DeleteRecords) or past its end (the topic was
// deleted and recreated). Either way franz-go has stopped fetching it
// (ConsumeResetOffset is a NoResetOffset). Nothing is lost silently: the
// partition stays stopped, with an error in the log and
// effectively_partition_state{state="stopped"} set, until an operator decides, unless the
// records were deleted and the policy is log-start. The partition stays
// assigned to this member, so no other member takes it and skips ahead.
func (c *Consumer) outOfRange(ctx context.Context, topic string, partition int32) {
	tp := topicPartition{topic, partition}
	c.mu.Lock()
	w := c.workers[tp]
	c.mu.Unlock()
	if w == nil || w.stopped.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pos, start, end, err := c.positionAndBounds(ctx, tp, w.fetched.Load())
	log := w.log.With(zap.Int64("position", pos), zap.Int64("log_start_offset", start), zap.Int64("end_offset", end))
	var why string
	switch {
	case err != nil:
		why = "position outside the log; its bounds could not be read: " + err.Error()
		log = w.log.With(zap.Error(err))
		log.Error("the partition's position is outside its log, and its bounds could not be read; stopping the partition. " +
			"Check the topic with kafka-topics.sh / `effectively replay --dry-run`, then restart the worker")
	case pos < start && c.opts.OffsetOutOfRange == settings.OutOfRangeLogStart:
		log.Error("records were deleted before this group processed them (retention or DeleteRecords); "+
			"kafka.offset_out_of_range is log-start, so the partition resumes at the log start and those records are lost",
			zap.Int64("offsets_skipped", start-pos))
		c.opts.Metrics.skippedOffsets(tp, start-pos)
		c.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {partition: {Epoch: -1, Offset: start}}})
		return
	case pos < start:
		why = fmt.Sprintf("records deleted unprocessed (position %d below the log start %d); fix: kafka.offset_out_of_range: log-start accepts the loss", pos, start)
		log.Error("records were deleted before this group processed them (retention or DeleteRecords): the partition is stopped "+
			"and applies nothing until you decide. To accept the loss and resume at the log start, restart the workers with "+
			"kafka.offset_out_of_range: log-start (env EFFECTIVELY_KAFKA_OFFSET_OUT_OF_RANGE=log-start); to keep the records next time, raise the topic's retention.ms "+
			"above the group's worst lag", zap.Int64("offsets_deleted", start-pos))
	case pos > end:
		why = fmt.Sprintf("position %d past the log end %d (topic recreated?); fix: effectively replay --topic %s --from-start", pos, end, topic)
		log.Error("the partition's position is past the end of its log: the topic was probably deleted and recreated. " +
			"The partition is stopped and applies nothing until you decide. To consume the new log from its start (already " +
			"claimed events stay duplicates), stop the workers and run `effectively replay --topic " + topic + " --from-start` " +
			"(a dry run), then again with --execute")
	default:
		// The log moved back under the position between the fetch and our
		// look (a lagging replica): fetch again from where we were.
		log.Warn("OFFSET_OUT_OF_RANGE, but the position is inside the log now; fetching again from it")
		c.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {partition: {Epoch: -1, Offset: pos}}})
		return
	}
	w.stop(why)
}

// positionAndBounds returns where the partition stands (after the last
// record fetched, else the position stored in PostgreSQL) and its log start
// and end offsets.
func (c *Consumer) positionAndBounds(ctx context.Context, tp topicPartition, fetched int64) (pos, start, end int64, err error) {
	pos = fetched
	if pos == 0 {
		stored, err := c.applier.Positions(ctx, c.opts.Group, tp.topic, []int32{tp.partition})
		if err != nil {
			return 0, 0, 0, fmt.Errorf("reading the stored position: %w", err)
		}
		pos = stored[tp.partition].Next
	}
	adm := kadm.NewClient(c.cl)
	starts, err := adm.ListStartOffsets(ctx, tp.topic)
	if err != nil {
		return pos, 0, 0, fmt.Errorf("listing the log start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, tp.topic)
	if err != nil {
		return pos, 0, 0, fmt.Errorf("listing the end offsets: %w", err)
	}
	s, ok1 := starts.Lookup(tp.topic, tp.partition)
	e, ok2 := ends.Lookup(tp.topic, tp.partition)
	switch {
	case !ok1 || !ok2:
		return pos, 0, 0, fmt.Errorf("partition %d is missing from the listed offsets", tp.partition)
	case s.Err != nil:
		return pos, 0, 0, fmt.Errorf("listing the log start offset: %w", s.Err)
	case e.Err != nil:
		return pos, 0, 0, fmt.Errorf("listing the end offset: %w", e.Err)
	}
	return pos, s.Offset, e.Offset, nil
}
