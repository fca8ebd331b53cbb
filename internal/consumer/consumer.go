package consumer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kzap"
	"go.uber.org/zap"

	settings "github.com/effectively-io/effectively/consumer"
)

// Options configure a Consumer. The options that are configuration keys
// (batch size and linger, timeouts, backoff, metadata age) have their
// defaults in package config, stated once; New refuses them unset rather
// than falling back silently. The others default as documented.
type Options struct {
	// Brokers are the seed brokers.
	Brokers []string
	// Group is the consumer group ID.
	Group string
	// Topics are consumed by the group.
	Topics []string
	// InstanceID enables static membership when set.
	InstanceID string
	// GroupProtocol is "classic" (default, cooperative-sticky) or "consumer"
	// (KIP-848: the broker assigns partitions).
	GroupProtocol string
	// StartOffset is where a partition without a stored position starts:
	// "earliest" (default) or "latest".
	StartOffset string
	// OffsetOutOfRange is what a partition does when its position is
	// outside its log: "stop" (default) stops it with an alert;
	// "log-start" resumes at the log start when the records before it were
	// deleted unprocessed (a position past the end always stops).
	OffsetOutOfRange string
	// MetadataMaxAge is how often the client refreshes topic metadata, and
	// so how soon a group notices a topic's new partitions (> 0).
	MetadataMaxAge time.Duration
	// OnPartitionCount, when set, is called (from its own goroutine) when
	// a topic is found to have grown while the member runs.
	OnPartitionCount func(topic string, partitions int)
	// SessionTimeout and RebalanceTimeout are passed to the group (default
	// 45 s and 60 s).
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	// ClientID names the client to the brokers.
	ClientID string
	// FetchMaxBytes and FetchMaxPartitionBytes bound what one fetch buffers.
	FetchMaxBytes          int32
	FetchMaxPartitionBytes int32
	// BatchMaxRecords is the most records per Apply (> 0).
	BatchMaxRecords int
	// BatchLinger is how long a partition waits to fill a batch (0: apply
	// what has arrived).
	BatchLinger time.Duration
	// MaxBufferedRecords per partition before it is paused (default the
	// larger of 4 × BatchMaxRecords and 10,000).
	MaxBufferedRecords int
	// MaxBufferedBytes per partition (keys and values) before it is
	// paused (default MaxBufferedBytesDefault): with large records the byte
	// bound binds first, so a hostile topic cannot fill memory.
	MaxBufferedBytes int
	// MaxInflightBytes bounds the bytes of records (keys and values) the
	// member holds across all its partitions, queued or in the batch being
	// applied (default MaxInflightBytesDefault; configuration key
	// consumer.max_inflight_bytes): past it every partition pauses until
	// half of it is applied. It is what sizes the process's memory.
	MaxInflightBytes int64
	// RevokeTimeout bounds the wait for a revoked partition's goroutine
	// (> 0); it must end well inside RebalanceTimeout.
	RevokeTimeout time.Duration
	// DrainTimeout bounds the graceful shutdown's wait for in-flight batches
	// (configuration key shutdown.drain_timeout; default
	// DrainTimeoutDefault); after it they are cancelled.
	DrainTimeout time.Duration
	// LeaveOnShutdown makes a static member (InstanceID set) leave the
	// group when it shuts down, so its partitions move at once instead of
	// after SessionTimeout (configuration key kafka.leave_on_shutdown). A
	// dynamic member always leaves.
	LeaveOnShutdown bool
	// LagInterval is how often the owned partitions' end offsets are listed
	// to recompute effectively_consumer_lag (default LagIntervalDefault).
	LagInterval time.Duration
	// RetryInitial and RetryMax shape the capped, jittered exponential
	// backoff between attempts of a failing batch (0 < initial ≤ max).
	RetryInitial time.Duration
	RetryMax     time.Duration
	// Logger receives the consumer's and franz-go's logs.
	Logger *zap.Logger
	// Metrics, when set, is updated as the consumer works.
	Metrics *Metrics
	// Hooks are extra franz-go hooks (kprom client metrics).
	Hooks []kgo.Hook
	// ExtraOpts are appended to the franz-go options last (tests).
	ExtraOpts []kgo.Opt
	// StopAt bounds consumption (a bounded replay): records of a listed
	// partition at or past its offset are never applied, and the partition
	// is paused once a fetch reaches it. Nil consumes without end.
	StopAt map[string]map[int32]int64
}

// Defaults of the options that are not configuration keys.
const (
	// LagIntervalDefault is how often the lag is recomputed from the
	// broker's end offsets: a partition that cannot apply (PostgreSQL down,
	// stopped) shows its lag rising within this long.
	LagIntervalDefault = 5 * time.Second
	// MaxBufferedBytesDefault is the per-partition byte bound.
	MaxBufferedBytesDefault = 8 << 20
)

// validate refuses unset configuration-backed options, naming the key.
func (o *Options) validate() error {
	var errs []error
	check := func(ok bool, field, key string) {
		if !ok {
			errs = append(errs, fmt.Errorf("consumer: Options.%s is unset or out of range (configuration key %s)", field, key))
		}
	}
	check(len(o.Brokers) > 0, "Brokers", "kafka.brokers")
	check(o.Group != "", "Group", "kafka.group")
	check(len(o.Topics) > 0, "Topics", "kafka.topics")
	check(o.BatchMaxRecords > 0, "BatchMaxRecords", "consumer.batch_max_records")
	check(o.BatchLinger >= 0, "BatchLinger", "consumer.batch_linger")
	check(o.RevokeTimeout > 0, "RevokeTimeout", "consumer.revoke_timeout")
	check(o.MetadataMaxAge > 0, "MetadataMaxAge", "kafka.metadata_max_age")
	check(o.RetryInitial > 0, "RetryInitial", "retry.initial")
	check(o.RetryMax >= o.RetryInitial, "RetryMax", "retry.max")
	return errors.Join(errs...)
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.MaxBufferedRecords <= 0 {
		// Pausing discards what the client has buffered for the partition
		// (it is fetched again on resume), so the threshold must sit well
		// above one fetch's worth of records (1 MiB of ~300-byte events is
		// ~3,500), or nearly every fetch would be thrown away and re-read.
		o.MaxBufferedRecords = max(4*o.BatchMaxRecords, 10000)
	}
	if o.MaxBufferedBytes <= 0 {
		o.MaxBufferedBytes = MaxBufferedBytesDefault
	}
	if o.MaxInflightBytes <= 0 {
		o.MaxInflightBytes = settings.MaxInflightBytesDefault
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = settings.DrainTimeoutDefault
	}
	if o.LagInterval <= 0 {
		o.LagInterval = LagIntervalDefault
	}
}

// Consumer is one member of the consumer group.
type Consumer struct {
	opts    Options
	applier Applier
	log     *zap.Logger
	cl      *kgo.Client

	// hardCtx is the parent of every partition worker's context; cancelling
	// it abandons in-flight batches (their transactions roll back).
	hardCtx    context.Context
	hardCancel context.CancelFunc

	// partitioner and counts are set after the client exists, when the
	// topics' partition counts are known; workers may already be running.
	// counts is the topics' partition counts as this member knows them (a
	// snapshot, replaced whole when a topic grows).
	partitioner atomic.Pointer[partitionerCheck]
	counts      atomic.Pointer[map[string]int]

	// budget bounds the bytes of records held across the partitions;
	// fetch keeps the client's buffered fetches within a share of it.
	budget *budget
	fetch  *fetchSizer
	// recordSize is the mean size of the records polled (keys and
	// values), smoothed: how many records the next poll may take.
	recordSize float64

	mu      sync.Mutex
	workers map[topicPartition]*partitionWorker
	joined  bool // the group assigned us at least once (possibly nothing)
	// closing is set when Run's context ends: the member is draining.
	closing bool
	// resumed are the positions adjustOffsets read, for workers created
	// before or after it ran; a revoke forgets them.
	resumed map[topicPartition]resumePoint
	// epochs are the reset epochs of stored positions this member has
	// logged, so a reassignment does not log the same reset again.
	epochs map[topicPartition]int64
	// growing marks topics whose new partition count is being looked up.
	growing map[string]bool
}

type topicPartition struct {
	topic     string
	partition int32
}

// resumePoint is where an assigned partition stands: stored is the position
// PostgreSQL holds, kafka the group's committed offset in Kafka (-1: none).
type resumePoint struct {
	stored, kafka int64
}

// New creates the group member; it does not connect until [Consumer.Run] or
// [Consumer.Ping].
func New(opts Options, applier Applier) (*Consumer, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	hardCtx, hardCancel := context.WithCancel(context.Background())
	c := &Consumer{
		opts:       opts,
		applier:    applier,
		log:        opts.Logger,
		hardCtx:    hardCtx,
		hardCancel: hardCancel,
		budget:     &budget{limit: opts.MaxInflightBytes},
		workers:    make(map[topicPartition]*partitionWorker),
		epochs:     make(map[topicPartition]int64),
		growing:    make(map[string]bool),
		resumed:    make(map[topicPartition]resumePoint),
	}

	kopts := []kgo.Opt{
		kgo.SeedBrokers(opts.Brokers...),
		kgo.ConsumerGroup(opts.Group),
		kgo.ConsumeTopics(opts.Topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.revoked),
		kgo.AdjustFetchOffsetsFn(c.adjustOffsets),
		kgo.WithLogger(kzap.New(opts.Logger.Named("kafka"), kzap.Level(kgo.LogLevelInfo))),
		kgo.DialTimeout(5 * time.Second),
		// A resumed partition is fetched only once the in-flight fetch
		// returns, and an idle broker holds a fetch for up to this long.
		// franz-go's 5 s default would leave a paused-then-resumed
		// partition idle for seconds whenever the other partitions are
		// quiet; 500 ms is the Java client's default.
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.MetadataMaxAge(opts.MetadataMaxAge),
		kgo.MetadataMinAge(min(opts.MetadataMaxAge, 5*time.Second)),
	}
	// No automatic reset: a position outside the log comes back as an
	// OFFSET_OUT_OF_RANGE fetch error, and [Consumer.outOfRange] decides
	// (franz-go would silently jump to the log start, or, for a recreated
	// topic, to offsets below the stored position, which are then skipped).
	if opts.StartOffset == settings.StartOffsetLatest {
		kopts = append(kopts, kgo.ConsumeResetOffset(kgo.NoResetOffset().AtEnd()))
	} else {
		kopts = append(kopts, kgo.ConsumeResetOffset(kgo.NoResetOffset().AtStart()))
	}
	if opts.GroupProtocol == settings.GroupProtocolConsumer {
		kopts = append(kopts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.CooperativeStickyBalancer()))
	} else {
		kopts = append(kopts, kgo.Balancers(kgo.CooperativeStickyBalancer()))
	}
	if opts.InstanceID != "" {
		kopts = append(kopts, kgo.InstanceID(opts.InstanceID))
	}
	if opts.SessionTimeout > 0 {
		kopts = append(kopts, kgo.SessionTimeout(opts.SessionTimeout))
	}
	if opts.RebalanceTimeout > 0 {
		kopts = append(kopts, kgo.RebalanceTimeout(opts.RebalanceTimeout))
	}
	if opts.ClientID != "" {
		kopts = append(kopts, kgo.ClientID(opts.ClientID))
	}
	// The fetch sizes start at the configured ones (franz-go's defaults:
	// Kafka's) or the budget's share, whichever is smaller, and follow the
	// records' compression (see fetchSizer).
	maxBytes, maxPart := int32(50<<20), int32(1<<20)
	if opts.FetchMaxBytes > 0 {
		maxBytes = opts.FetchMaxBytes
	}
	if opts.FetchMaxPartitionBytes > 0 {
		maxPart = opts.FetchMaxPartitionBytes
	}
	c.fetch = newFetchSizer(opts.MaxInflightBytes, maxBytes, maxPart)
	kopts = append(kopts, kgo.FetchMaxBytes(c.fetch.curBytes), kgo.FetchMaxPartitionBytes(c.fetch.curPart),
		kgo.BrokerMaxReadBytes(2*maxBytes), kgo.WithHooks(c.fetch))
	if len(opts.Hooks) > 0 {
		kopts = append(kopts, kgo.WithHooks(opts.Hooks...))
	}
	kopts = append(kopts, opts.ExtraOpts...)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		hardCancel()
		return nil, fmt.Errorf("creating the kafka client: %w", err)
	}
	c.cl = cl
	c.fetch.cl.Store(cl)
	return c, nil
}

// Topics gives the member its topics' partition counts at start-up (topic →
// count) and the topics whose records it checks against murmur2 of their key
// (the producer contract). A partition assigned beyond a topic's count later
// means the topic grew: the member warns (see [WarnPartitionCount]) and
// checks against the new count.
func (c *Consumer) Topics(counts map[string]int, checkPartitioner []string) {
	snapshot := make(map[string]int, len(counts))
	for t, n := range counts {
		snapshot[t] = n
	}
	c.counts.Store(&snapshot)
	c.partitioner.Store(newPartitionerCheck(c.log, c.opts.Metrics, checkPartitioner))
	for _, t := range c.opts.Topics {
		c.opts.Metrics.initTopic(t)
	}
}

// partitionCount is topic's partition count as this member knows it (0 if
// unknown).
func (c *Consumer) partitionCount(topic string) int {
	if m := c.counts.Load(); m != nil {
		return (*m)[topic]
	}
	return 0
}

// Stopped returns the partitions stopped because their position is outside
// their log (see [Options.OffsetOutOfRange]), as "topic/partition".
func (c *Consumer) Stopped() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for tp, w := range c.workers {
		if w.stopped.Load() {
			out = append(out, fmt.Sprintf("%s/%d", tp.topic, tp.partition))
		}
	}
	sort.Strings(out)
	return out
}

// Retrying returns the partitions that are retrying a failing batch (a
// transient fault: database down, serialization failures, …).
func (c *Consumer) Retrying() []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int32
	for tp, w := range c.workers {
		w.mu.Lock()
		if w.retrying {
			out = append(out, tp.partition)
		}
		w.mu.Unlock()
	}
	return out
}

// Joined reports whether the group has assigned this member at least once.
func (c *Consumer) Joined() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.joined
}

// Closing reports whether the member is shutting down (draining).
func (c *Consumer) Closing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// Status returns the member's partitions as it sees them, in topic and
// partition order.
func (c *Consumer) Status() []PartitionStatus {
	workers := c.ownedWorkers()
	out := make([]PartitionStatus, 0, len(workers))
	for _, w := range workers {
		out = append(out, w.status())
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// Run polls until ctx is cancelled, then shuts down gracefully: in-flight
// batches finish (up to DrainTimeout) and commit, and the member leaves the
// group.
func (c *Consumer) Run(ctx context.Context) error {
	defer c.hardCancel()
	lagCtx, stopLag := context.WithCancel(ctx)
	lagDone := make(chan struct{})
	go func() {
		defer close(lagDone)
		c.refreshLag(lagCtx)
	}()
	defer func() {
		stopLag()
		<-lagDone
	}()
	for {
		fetches := c.cl.PollRecords(ctx, c.pollSize())
		if fetches.IsClientClosed() || ctx.Err() != nil {
			c.cl.AllowRebalance()
			break
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			// A poll cancelled by its context reports on a fake partition -1.
			if partition < 0 || errors.Is(err, context.Canceled) {
				return
			}
			if errors.Is(err, kerr.OffsetOutOfRange) {
				c.outOfRange(ctx, topic, partition)
				return
			}
			c.log.Warn("fetch error", zap.String("topic", topic), zap.Int32("partition", partition), zap.Error(err))
		})
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			p.Records = c.bounded(p)
			if len(p.Records) == 0 {
				return
			}
			c.mu.Lock()
			w := c.workers[topicPartition{p.Topic, p.Partition}]
			c.mu.Unlock()
			if w == nil {
				// BlockRebalanceOnPoll guarantees the worker exists for any
				// partition a poll returns; dropping here is safe anyway,
				// nothing was committed past these records.
				c.log.Error("records for a partition without a worker", zap.String("topic", p.Topic), zap.Int32("partition", p.Partition))
				return
			}
			w.hwm.Store(p.HighWatermark)
			w.fetched.Store(p.Records[len(p.Records)-1].Offset + 1)
			c.noteRecordSize(p.Records)
			w.push(p.Records)
		})
		c.cl.AllowRebalance()
	}
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	stopLag()
	<-lagDone
	c.shutdown()
	return nil
}

// pollSize is how many records the next poll may take: what the budget has
// room for at the records' mean size (at least one), at most four batches.
// Records the poll leaves are kept by the client, and dropped there if
// their partition is paused meanwhile; records a poll takes are queued
// whatever the budget says, so a poll of 2,000 records of 1 MiB would pass
// it by 2 GiB.
func (c *Consumer) pollSize() int {
	n := 4 * c.opts.BatchMaxRecords
	if c.recordSize > 0 {
		// Records of (nearly) no bytes count as one byte each, so the
		// quotient stays in range.
		room := float64(c.budget.limit - c.budget.held())
		n = int(max(1, min(float64(n), room/max(c.recordSize, 1))))
	}
	return n
}

// noteRecordSize folds the sizes of polled records into the mean.
func (c *Consumer) noteRecordSize(recs []*kgo.Record) {
	mean := float64(recordBytes(recs)) / float64(len(recs))
	if c.recordSize == 0 {
		c.recordSize = mean
		return
	}
	c.recordSize = 0.8*c.recordSize + 0.2*mean
}

// bounded returns the partition's records below its StopAt offset, pausing
// the partition once a fetch reaches that offset.
func (c *Consumer) bounded(p kgo.FetchTopicPartition) []*kgo.Record {
	recs := p.Records
	stop, ok := c.opts.StopAt[p.Topic][p.Partition]
	if !ok || len(recs) == 0 || recs[len(recs)-1].Offset < stop {
		return recs
	}
	// A worker resuming the partition after backpressure may let it fetch
	// again; what it fetches past the bound is dropped here again.
	c.cl.PauseFetchPartitions(map[string][]int32{p.Topic: {p.Partition}})
	return recs[:sort.Search(len(recs), func(i int) bool { return recs[i].Offset >= stop })]
}

// ownedWorkers is a snapshot of the partitions' workers, taken under c.mu
// and used without it.
func (c *Consumer) ownedWorkers() []*partitionWorker {
	c.mu.Lock()
	defer c.mu.Unlock()
	workers := make([]*partitionWorker, 0, len(c.workers))
	for _, w := range c.workers {
		workers = append(workers, w)
	}
	return workers
}

// shutdown drains in-flight batches, then leaves the group.
func (c *Consumer) shutdown() {
	workers := c.ownedWorkers()
	for _, w := range workers {
		w.stopGracefully()
	}
	timer := time.NewTimer(c.opts.DrainTimeout)
	defer timer.Stop()
	for _, w := range workers {
		select {
		case <-w.done:
		case <-timer.C:
			c.log.Warn("in-flight batches did not finish within the drain timeout; cancelling them", zap.Duration("drain_timeout", c.opts.DrainTimeout))
			c.hardCancel()
			<-w.done
		}
	}
	// Leaving the group runs the revoke callback, which finds the workers
	// stopped. A static member does not leave here (franz-go keeps it in
	// the group until its session expires, so a restart gets its
	// partitions back without a rebalance) ...
	c.cl.CloseAllowingRebalance()
	// ... unless it is told it is being removed: then it leaves by its
	// instance ID (KIP-345), from a fresh client, now that the old one no
	// longer heartbeats (leaving while it still did would make it rejoin).
	if c.opts.InstanceID != "" && c.opts.LeaveOnShutdown {
		c.leaveStatic()
	}
}

// leaveStatic removes this static member from the group by its instance ID.
func (c *Consumer) leaveStatic() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	log := c.log.With(zap.String("group", c.opts.Group), zap.String("instance_id", c.opts.InstanceID))
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.opts.Brokers...), kgo.DialTimeout(5 * time.Second),
		kgo.WithLogger(kzap.New(c.opts.Logger.Named("kafka"), kzap.Level(kgo.LogLevelWarn)))}, c.opts.ExtraOpts...)...)
	if err == nil {
		defer cl.Close()
		var resps kadm.LeaveGroupResponses
		resps, err = kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(c.opts.Group).InstanceIDs(c.opts.InstanceID).
			Reason("kafka.leave_on_shutdown: the member is being removed"))
		if err == nil {
			err = resps.Error()
		}
	}
	if err != nil {
		log.Warn("leaving the group by instance ID failed; the member's partitions move when kafka.session_timeout expires", zap.Error(err))
		return
	}
	log.Info("left the group by instance ID (kafka.leave_on_shutdown): its partitions move to the other members now")
}

// Close releases the client when Run was never called.
func (c *Consumer) Close() {
	c.hardCancel()
	c.cl.Close()
}

// rebudget has every partition re-evaluate its pause after the budget
// became exhausted or left that state.
func (c *Consumer) rebudget() {
	c.opts.Metrics.setInflight(c.budget.held())
	workers := c.ownedWorkers()
	for _, w := range workers {
		w.mu.Lock()
		w.updatePauseLocked()
		w.mu.Unlock()
	}
}

// Ping checks that a broker answers: every known broker is asked at once
// (ApiVersions) and one answer is enough, so a broker that swallows
// requests cannot spend the whole probe before the others are asked.
// Before the client has discovered the cluster it asks the seeds, one by
// one, as franz-go's Ping does.
func (c *Consumer) Ping(ctx context.Context) error {
	brokers := c.cl.DiscoveredBrokers()
	if len(brokers) == 0 {
		return c.cl.Ping(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(brokers))
	for _, b := range brokers {
		go func() {
			_, err := b.Request(ctx, kmsg.NewPtrApiVersionsRequest())
			errs <- err
		}()
	}
	var failed []error
	for range brokers {
		err := <-errs
		if err == nil {
			return nil
		}
		failed = append(failed, err)
	}
	return fmt.Errorf("no broker of %d answered: %w", len(brokers), errors.Join(failed...))
}

func (c *Consumer) assigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.joined = true
	for topic, partitions := range assigned {
		for _, p := range partitions {
			tp := topicPartition{topic, p}
			if _, ok := c.workers[tp]; ok {
				continue
			}
			if n := c.partitionCount(topic); n > 0 && int(p) >= n && !c.growing[topic] {
				c.growing[topic] = true
				go c.partitionsGrew(cl, topic, n, int(p)+1)
			}
			w := newPartitionWorker(c, cl, tp)
			c.opts.Metrics.initPartition(tp)
			if rp, ok := c.resumed[tp]; ok {
				w.resume(rp.stored, rp.kafka)
			}
			c.workers[tp] = w
			go w.run()
			c.log.Info("partition assigned", zap.String("topic", topic), zap.Int32("partition", p))
		}
	}
	c.opts.Metrics.setAssigned(len(c.workers))
}

// revoked stops the partitions' workers and waits for them (bounded) before
// returning: after this callback the partitions belong to someone else, and a
// commit from here would rewind the new owner. In-flight batches are
// cancelled, not waited for: their transactions never commit, so the new
// owner simply redoes them.
func (c *Consumer) revoked(_ context.Context, cl *kgo.Client, revoked map[string][]int32) {
	c.mu.Lock()
	var stopped []*partitionWorker
	for topic, partitions := range revoked {
		for _, p := range partitions {
			tp := topicPartition{topic, p}
			w, ok := c.workers[tp]
			if !ok {
				continue
			}
			delete(c.workers, tp)
			// What was read at this assignment is stale once another
			// member has owned the partition.
			delete(c.resumed, tp)
			w.cancel()
			stopped = append(stopped, w)
		}
	}
	c.opts.Metrics.setAssigned(len(c.workers))
	c.mu.Unlock()
	if len(stopped) > 0 {
		// Cooperative rebalances call this with nothing to revoke too;
		// only a partition moving counts.
		c.opts.Metrics.rebalanced()
	}

	timer := time.NewTimer(c.opts.RevokeTimeout)
	defer timer.Stop()
	resume := make(map[string][]int32)
	for _, w := range stopped {
		select {
		case <-w.done:
		case <-timer.C:
			// The worker's context is cancelled, so it can neither commit its
			// transaction nor the Kafka offset; it is abandoned.
			c.log.Error("revoked partition's worker did not stop in time; abandoning it",
				zap.String("topic", w.tp.topic), zap.Int32("partition", w.tp.partition), zap.Duration("revoke_timeout", c.opts.RevokeTimeout))
		}
		resume[w.tp.topic] = append(resume[w.tp.topic], w.tp.partition)
		c.opts.Metrics.forget(w.tp)
		c.log.Info("partition revoked", zap.String("topic", w.tp.topic), zap.Int32("partition", w.tp.partition))
	}
	// Pauses are client-wide and survive a revoke: clear them so the
	// partition fetches again if it comes back.
	if len(resume) > 0 {
		cl.ResumeFetchPartitions(resume)
	}
}

// adjustOffsets replaces the offsets Kafka has committed with the positions
// stored in PostgreSQL, which are authoritative: they were written in the
// same transactions as the effects. Kafka's commit lags by at most a batch
// after a crash; one ahead of the database, or further behind, means someone
// moved it with Kafka's own tools, which the worker explains and ignores.
// Either way the partition's worker then commits the stored position to
// Kafka, so Kafka's tools read the true lag without waiting for a record.
func (c *Consumer) adjustOffsets(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	for topic, parts := range offsets {
		ps := make([]int32, 0, len(parts))
		for p := range parts {
			ps = append(ps, p)
		}
		var stored map[int32]Position
		err := retry(ctx, c.opts.RetryInitial, c.opts.RetryMax, func() error {
			var err error
			stored, err = c.applier.Positions(ctx, c.opts.Group, topic, ps)
			if err != nil {
				c.log.Warn("reading stored positions failed; retrying", zap.String("topic", topic), zap.Error(err))
			}
			return err
		})
		if err != nil {
			return offsets, err
		}
		c.logResetEpochs(topic, stored)
		kafka := make(map[int32]int64, len(stored))
		for p, pos := range stored {
			next := pos.Next
			kafkaAt := parts[p].EpochOffset().Offset
			kafka[p] = max(kafkaAt, -1) // franz-go gives a start offset (-2, -1) where nothing is committed
			switch {
			case kafkaAt > next:
				c.log.Warn("Kafka's committed offset is ahead of the position stored in PostgreSQL; "+
					"it was probably moved with Kafka's own tools. PostgreSQL is authoritative and wins: resuming from its position. "+
					"To skip or reprocess records, stop the workers and use `effectively replay`, which moves both",
					zap.String("topic", topic), zap.Int32("partition", p), zap.Int64("kafka_offset", kafkaAt), zap.Int64("stored_offset", next))
			case kafkaAt >= 0 && next-kafkaAt > int64(c.opts.BatchMaxRecords):
				// Further behind than one batch: not a commit lost in a
				// crash (the worker commits to Kafka after every batch).
				c.log.Warn("Kafka's committed offset is behind the position stored in PostgreSQL by more than a batch; "+
					"it was probably rewound with Kafka's own tools, which does not rewind this worker. PostgreSQL is authoritative and wins: "+
					"resuming from its position. To reprocess records, stop the workers and use `effectively replay` (dry run first, then --execute)",
					zap.String("topic", topic), zap.Int32("partition", p), zap.Int64("kafka_offset", kafkaAt), zap.Int64("stored_offset", next))
			case kafkaAt >= 0 && kafkaAt < next:
				c.log.Info("resuming from the position stored in PostgreSQL (Kafka's commit lagged); committing it to Kafka",
					zap.String("topic", topic), zap.Int32("partition", p), zap.Int64("kafka_offset", kafkaAt), zap.Int64("stored_offset", next))
			}
			parts[p] = kgo.NewOffset().At(next).WithEpoch(-1)
		}
		// The workers commit the stored positions where Kafka's differ,
		// before any record arrives (see partitionWorker.syncKafka).
		c.noteResumed(topic, stored, kafka)
	}
	return offsets, nil
}

// logResetEpochs logs, once per epoch, that a partition resumes from a
// position a replay set, so a rewind is visible in the worker's log.
func (c *Consumer) logResetEpochs(topic string, stored map[int32]Position) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, pos := range stored {
		tp := topicPartition{topic, p}
		if pos.ResetEpoch <= 0 || c.epochs[tp] == pos.ResetEpoch {
			continue
		}
		c.epochs[tp] = pos.ResetEpoch
		c.log.Info("starting from a stored position that `effectively replay --execute` reset",
			zap.String("topic", topic), zap.Int32("partition", p), zap.Int64("stored_offset", pos.Next), zap.Int64("reset_epoch", pos.ResetEpoch))
	}
}

// noteResumed hands the partitions' workers where they resume: the stored
// positions (for lag before the first batch, and to commit to Kafka) and
// Kafka's committed offsets (-1: none).
func (c *Consumer) noteResumed(topic string, stored map[int32]Position, kafka map[int32]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, pos := range stored {
		tp := topicPartition{topic, p}
		c.resumed[tp] = resumePoint{stored: pos.Next, kafka: kafka[p]}
		if w := c.workers[tp]; w != nil {
			w.resume(pos.Next, kafka[p])
		}
	}
}
