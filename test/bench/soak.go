package main

// The soak (-soak, make soak): does the worker hold its throughput, latency
// and memory over many retention periods, and does claims storage stay
// bounded by the retention window rather than grow with the run?
//
//  1. The maximum: the real worker with its defaults drains a pre-produced
//     topic of the reference workload (-soak-events records), -runs times;
//     the median rate is the maximum (-soak-rate skips this).
//  2. The soak: a fresh topic and schema, a worker with short retention
//     (-soak-retention, -soak-prune-interval), and a paced producer offering
//     -soak-share of the maximum for -soak-warmup and then -soak-duration,
//     every record timestamped when it is handed to the producer. The
//     warm-up takes the fresh schema to its steady state (the claims table
//     through its first drops, every account created, the database's WAL
//     segments made); its samples are shown, the summary compares the
//     measured run's first and last stretches.
//  3. Every -soak-sample: applied events/s (stored positions), p50/p99 of
//     the worker's end-to-end histogram's change since the last sample, the
//     worker's RSS and Go heap, the worker's and PostgreSQL's CPU, claims
//     storage, live and dead tuples, autovacuum activity and the pruner's
//     rows.
//
// It prints a table and a summary, and writes them as markdown
// (-soak-report) and a plot (-soak-plot, soakplot.go).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/effectively-io/effectively/config"
	settings "github.com/effectively-io/effectively/consumer"
	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/internal/consumer"
)

// soakOptions are the -soak-* flags.
type soakOptions struct {
	on            bool
	duration      time.Duration
	warmup        time.Duration
	share         float64
	events        int
	rate          int
	retention     time.Duration
	pruneInterval time.Duration
	sample        time.Duration
	probe         time.Duration
	plot          string
	report        string
	heapDir       string
}

func (s *soakOptions) flags(fs *flag.FlagSet) {
	fs.BoolVar(&s.on, "soak", false, "instead of the benchmark, run the soak: measure the maximum, then offer -soak-share of it for -soak-duration with short retention, sampling every -soak-sample")
	fs.DurationVar(&s.duration, "soak-duration", 30*time.Minute, "length of the soak's paced run")
	fs.DurationVar(&s.warmup, "soak-warmup", 5*time.Minute, "offer the same rate for this long before the measured run: its samples are shown (negative times) but the summary compares the measured run's first and last stretches (0: measure from the cold start)")
	fs.Float64Var(&s.share, "soak-share", 0.80, "the soak's offered rate as a share of the measured maximum")
	fs.IntVar(&s.events, "soak-events", 200_000, "records of the reference workload the maximum is measured on (the worker drains them -runs times; median)")
	fs.IntVar(&s.rate, "soak-rate", 0, "offer this many events/s instead of -soak-share of a measured maximum (0: measure it)")
	fs.DurationVar(&s.retention, "soak-retention", 2*time.Minute, "the soak worker's dedupe.retention (upstream.max_retry_horizon is set to a quarter of it and dedupe.reconciliation_window to half, so that it validates)")
	fs.DurationVar(&s.pruneInterval, "soak-prune-interval", 10*time.Second, "the soak worker's dedupe.prune_interval")
	fs.DurationVar(&s.sample, "soak-sample", 10*time.Second, "time between two samples")
	fs.DurationVar(&s.probe, "soak-probe", 5*time.Minute, "after the drains, offer the drained maximum for this long with the producer in the loop and the soak's retention; the rate the worker sustains once the claims hold a full window (retention + retention/2 + the prune interval), or over the probe's second half if later, is the maximum the share applies to (0: the drained maximum)")
	fs.StringVar(&s.plot, "soak-plot", "docs/explanation/soak.png", "where the soak writes its plot (PNG; empty: none)")
	fs.StringVar(&s.heapDir, "soak-heap-dir", os.TempDir(), "where the soak writes the worker's heap profiles (after a GC) at the start and the end of the measured run, to compare with go tool pprof -diff_base (empty: none)")
	fs.StringVar(&s.report, "soak-report", "docs/explanation/soak.md", "where the soak writes its table and summary as markdown (empty: none)")
}

func (s *soakOptions) validate() error {
	switch {
	case !s.on:
		return nil
	case s.duration <= 0 || s.sample <= 0:
		return errors.New("-soak-duration and -soak-sample: want positive durations")
	case s.warmup < 0:
		return fmt.Errorf("-soak-warmup %s: want 0 (none) or a positive duration", s.warmup)
	case s.sample > s.duration:
		return fmt.Errorf("-soak-sample %s is longer than -soak-duration %s: want several samples", s.sample, s.duration)
	case !(s.share > 0 && s.share <= 2):
		return fmt.Errorf("-soak-share %v: want a share of the maximum above 0 (1 is the maximum)", s.share)
	case s.events < 1 || s.rate < 0:
		return errors.New("-soak-events: want at least 1; -soak-rate: want 0 (measure) or more")
	case s.retention < 4*time.Second:
		return fmt.Errorf("-soak-retention %s: want at least 4s (the worker validates retention ≥ 2 × upstream.max_retry_horizon + dedupe.reconciliation_window, set here to a quarter and a half of it)", s.retention)
	case s.pruneInterval < time.Second:
		return fmt.Errorf("-soak-prune-interval %s: want at least 1s (dedupe.prune_interval's minimum)", s.pruneInterval)
	}
	return nil
}

// measured reports whether a sample taken elapsed after the paced run
// started belongs to the measured run (half a sample early for jitter).
func (s soakOptions) measured(elapsed time.Duration) bool {
	return elapsed >= s.warmup-s.sample/2
}

// clock is elapsed on the report's axis: since the measured run started,
// negative during the warm-up.
func (s soakOptions) clock(elapsed time.Duration) time.Duration { return elapsed - s.warmup }

// steady is how long a soak run takes for its claims to first hold a full
// window: the retention, a generation (the worker's default
// dedupe.generation_interval for that retention) and a prune pass; from
// then on a generation is dropped for every one opened, and a claim costs
// what it will for the rest of the run.
func (s *soakOptions) steady() time.Duration {
	return s.retention + config.Dedupe{Retention: s.retention}.ClaimGenerationInterval() + s.pruneInterval
}

// env configures the soak worker's retention. dedupe.retention must be
// at least 2 × upstream.max_retry_horizon + dedupe.reconciliation_window
// (invariant 9): a quarter and a half of it make exactly that.
func (s soakOptions) env() []string {
	return []string{
		"EFFECTIVELY_DEDUPE_RETENTION=" + s.retention.String(),
		"EFFECTIVELY_DEDUPE_PRUNE_INTERVAL=" + s.pruneInterval.String(),
		"EFFECTIVELY_UPSTREAM_MAX_RETRY_HORIZON=" + (s.retention / 4).String(),
		"EFFECTIVELY_DEDUPE_RECONCILIATION_WINDOW=" + (s.retention / 2).String(),
	}
}

// claimStats is the claims storage at one moment: the relations of
// effectively_claims' partition tree when that table exists, else
// processed_events.
type claimStats struct {
	rels         int   // relations (partitions; 1 when not partitioned)
	bytes        int64 // table + indexes + TOAST
	indexBytes   int64
	live, dead   int64 // pg_stat_user_tables' estimates
	autovacuums  int64 // cumulative autovacuum_count
	autoanalyzes int64
	vacuum       string // phases of the vacuums running on them now
	// hiddenVacuums are vacuums running whose relation this role may not
	// see (autovacuum workers, without pg_read_all_stats).
	hiddenVacuums int
}

// claimsStatsSQL reads claimStats of the partition tree of $1 (for a plain
// table pg_partition_tree is empty: the table itself).
const claimsStatsSQL = `
WITH rel AS (SELECT relid FROM pg_partition_tree($1::regclass) UNION SELECT $1::regclass)
SELECT count(*)::int,
       coalesce(sum(pg_total_relation_size(rel.relid)), 0)::bigint,
       coalesce(sum(pg_indexes_size(rel.relid)), 0)::bigint,
       coalesce(sum(s.n_live_tup), 0)::bigint,
       coalesce(sum(s.n_dead_tup), 0)::bigint,
       coalesce(sum(s.autovacuum_count), 0)::bigint,
       coalesce(sum(s.autoanalyze_count), 0)::bigint,
       coalesce((SELECT string_agg(DISTINCT v.phase, '+') FROM pg_stat_progress_vacuum v
                 WHERE v.relid IN (SELECT relid FROM rel)), ''),
       (SELECT count(*)::int FROM pg_stat_progress_vacuum v WHERE v.relid IS NULL)
FROM rel LEFT JOIN pg_stat_user_tables s ON s.relid = rel.relid`

// claimsTable returns the table holding the claims in d's schema.
func (d *db) claimsTable(ctx context.Context) (string, error) {
	var partitioned bool
	if err := d.pool.QueryRow(ctx, `SELECT to_regclass('effectively_claims') IS NOT NULL`).Scan(&partitioned); err != nil {
		return "", fmt.Errorf("looking for effectively_claims: %w", err)
	}
	if partitioned {
		return "effectively_claims", nil
	}
	return "processed_events", nil
}

func (d *db) claimStats(ctx context.Context, table string) (claimStats, error) {
	var c claimStats
	err := d.pool.QueryRow(ctx, claimsStatsSQL, table).Scan(&c.rels, &c.bytes, &c.indexBytes, &c.live, &c.dead, &c.autovacuums, &c.autoanalyzes, &c.vacuum, &c.hiddenVacuums)
	if err != nil {
		return c, fmt.Errorf("reading the size and statistics of %s: %w", table, err)
	}
	return c, nil
}

// walStats are the cluster's cumulative WAL and checkpoint counters
// (pg_stat_wal, pg_stat_bgwriter: readable by any role). The stack serves
// the benchmark alone, so their change is the soak's.
type walStats struct {
	bytes, fpi  int64
	checkpoints int64 // timed + requested
}

func (d *db) walStats(ctx context.Context) (walStats, error) {
	var w walStats
	err := d.pool.QueryRow(ctx, `SELECT (SELECT wal_bytes::bigint FROM pg_stat_wal), (SELECT wal_fpi FROM pg_stat_wal),
       (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)`).Scan(&w.bytes, &w.fpi, &w.checkpoints)
	if err != nil {
		return w, fmt.Errorf("reading pg_stat_wal and pg_stat_bgwriter: %w", err)
	}
	return w, nil
}

// prunerMetric matches the worker's metrics about retention other than
// effectively_pruned_rows_total (generations dropped, pass times, …):
// whatever exists is reported, so the soak needs no change when they do.
var prunerMetric = regexp.MustCompile(`^effectively_\w*(prun|generation|retention|drop)\w*$`)

// soakPoint is one sample: cumulative values at a moment, and the window
// since the previous sample.
type soakPoint struct {
	elapsed  time.Duration // since the paced run started
	applied  int64         // sum of the stored positions
	produced int64         // records the producer has had acked
	hist     []bucket      // cumulative end-to-end histogram
	pruned   float64       // effectively_pruned_rows_total, all tables
	extra    map[string]float64
	rss      int64
	heap     int64 // the worker's Go heap in use (go_memstats_heap_inuse_bytes)
	// buffered is the keys and values of the records the worker has
	// fetched and not yet applied: its partitions' queues and the client's
	// buffered fetches.
	buffered int64
	claims   claimStats
	wal      walStats

	// The window since the previous sample.
	rate, offered      float64 // applied and acked events/s
	p50, p99           quantileResult
	workerCPU, pgCPU   float64 // cores (CPU seconds / wall seconds)
	benchCPU           float64 // this program's cores: the paced producer and the sampling
	autovacuums        int64   // autovacuums of the claims relations that finished
	prunedRows         float64
	workerUs, pgUs     float64 // CPU µs per applied event
	windowObservations float64
	walPerEvent        float64 // WAL bytes per applied event
	fpiPerEvent        float64 // full-page images per applied event
	checkpoints        int64   // checkpoints started
}

// soakReport is what the soak prints and writes.
type soakReport struct {
	opts      options
	started   time.Time
	loadStart string
	loadEnd   string
	worker    string
	maxRates  []float64
	drainMax  float64   // the drains' median
	sustained []float64 // the probe's applied rates after probeFrom
	probeFrom time.Duration
	// probe is set on the probe's report: its run is not drained.
	probe       bool
	max         float64 // events/s; 0 when -soak-rate was given
	rate        int     // offered events/s
	events      int     // records the paced run offers
	accounts    int
	table       string // the claims table
	topic       string
	points      []soakPoint
	paceTook    time.Duration
	drainedIn   time.Duration // from the end of pacing until every record was applied
	problems    []string
	extraNames  []string
	interrupted bool // by a signal: the samples up to then, no drain or check
	wall        time.Duration
	summaryText []string // filled by summarize
	// heapStart and heapEnd are the worker's heap profiles at the start
	// and the end of the measured run ("" when none was taken).
	heapStart, heapEnd string
}

// runSoak measures the maximum, then runs the soak.
func (b *bench) runSoak(ctx context.Context) (*soakReport, error) {
	so := b.opts.soak
	rep := &soakReport{opts: b.opts, started: time.Now(), loadStart: loadAvg(), rate: so.rate, accounts: b.opts.accounts}
	rep.worker = b.workerVersion(ctx)
	if rep.rate == 0 {
		if err := b.soakMaximum(ctx, rep); err != nil {
			return nil, err
		}
		if so.probe > 0 {
			if err := b.soakProbe(ctx, rep); err != nil {
				return nil, err
			}
		}
		rep.rate = max(1, int(so.share*rep.max))
	}
	if err := b.soakRun(ctx, rep); err != nil {
		return nil, err
	}
	rep.loadEnd = loadAvg()
	rep.wall = time.Since(rep.started)
	return rep, nil
}

// soakMaximum drains the reference workload (-soak-events records, as many
// events per account as the benchmark's) -runs times with the worker's
// defaults and takes the median rate.
func (b *bench) soakMaximum(ctx context.Context, rep *soakReport) error {
	so := b.opts.soak
	b.opts.accounts = max(1, int(int64(b.opts.accounts)*int64(so.events)/int64(b.opts.events)))
	b.opts.events = so.events
	if err := b.produceMain(ctx); err != nil {
		return err
	}
	for i := range b.opts.runs {
		progress("soak: maximum, run %d/%d: the worker drains %d records", i+1, b.opts.runs, so.events)
		r, err := b.runWorker(ctx, "soak-max", int64(so.events), true)
		if err != nil {
			return fmt.Errorf("measuring the maximum: %w", err)
		}
		rep.problems = append(rep.problems, r.problems...)
		rate := float64(r.records) / r.steady.Seconds()
		progress("soak: maximum, run %d/%d: %.0f events/s", i+1, b.opts.runs, rate)
		rep.maxRates = append(rep.maxRates, rate)
	}
	rep.max = median(rep.maxRates)
	rep.drainMax = rep.max
	return nil
}

// soakProbe offers the drained maximum for -soak-probe, as the soak runs
// (the producer in the loop, the soak's retention, a growing claims
// table), and takes the median applied rate once the claims hold a full
// window (or over its second half, if later) as the maximum: on a small
// machine the producer and the broker take cores the drain did not pay
// for, and a claim costs more with a full window of claims to probe than
// in the first minutes (a probe of 90 s measured 15,832 ev/s with its rate
// still falling; at 80% of that the soak fell behind after 12 minutes).
// The probe's backlog is not drained: the soak runs on a topic and schema
// of its own.
func (b *bench) soakProbe(ctx context.Context, rep *soakReport) error {
	so := b.opts.soak
	saved := b.opts.soak
	b.opts.soak.duration, b.opts.soak.warmup, b.opts.soak.heapDir = so.probe, 0, ""
	defer func() { b.opts.soak = saved }()
	probe := &soakReport{opts: b.opts, rate: int(rep.drainMax), accounts: rep.accounts, probe: true}
	progress("soak: maximum with the producer in the loop: offering %d ev/s for %s", probe.rate, so.probe)
	if err := b.soakRun(ctx, probe); err != nil {
		return fmt.Errorf("probing the sustained maximum: %w", err)
	}
	rep.problems = append(rep.problems, probe.problems...)
	from := max(so.probe/2, so.steady())
	if from >= so.probe {
		from = so.probe / 2
		progress("warning: the probe of %s ends before the claims hold a full window (%s): its second half is measured", so.probe, so.steady())
	}
	rep.probeFrom = from
	for _, pt := range probe.points {
		if pt.elapsed > from && pt.elapsed <= so.probe {
			rep.sustained = append(rep.sustained, pt.rate)
		}
	}
	if len(rep.sustained) == 0 {
		return fmt.Errorf("the probe of %s took no sample in its second half (-soak-sample %s)", so.probe, so.sample)
	}
	rep.max = min(rep.drainMax, median(rep.sustained))
	progress("soak: sustained maximum %.0f ev/s (drained %.0f)", rep.max, rep.drainMax)
	return nil
}

// soakRun is the paced run with sampling.
func (b *bench) soakRun(ctx context.Context, rep *soakReport) error {
	so := b.opts.soak
	total := so.warmup + so.duration
	rep.events = int(float64(rep.rate) * total.Seconds())
	gen, err := workload.NewGenerator(workload.Config{
		Accounts: rep.accounts, Events: rep.events,
		Duplicates: 0.1, OutOfOrder: 0.1,
		Seed: b.opts.seed + 2, StartTime: time.Now(), TimeSpan: total,
	})
	if err != nil {
		return err
	}
	// The soak's records are timestamped now: time-based retention keeps
	// the broker's disk to the last 15 minutes (30 minutes at 30,000
	// events/s would be some 17 GB). A worker that falls that far behind
	// stops on kafka.offset_out_of_range (stop), which the table shows.
	keep, segment := (15 * time.Minute).Milliseconds(), int64(64<<20)
	topic, err := b.newTopicConfig(ctx, "soak", map[string]*string{
		"retention.ms":  ptr(fmt.Sprint(keep)),
		"segment.bytes": ptr(fmt.Sprint(segment)),
	})
	if err != nil {
		return err
	}
	rep.topic = topic
	d, err := b.newDB(ctx, "soak", migrateWorker)
	if err != nil {
		return err
	}
	defer d.drop(context.WithoutCancel(ctx))
	if rep.table, err = d.claimsTable(ctx); err != nil {
		return err
	}
	group := b.name("soak")
	cl, err := b.producer(topic)
	if err != nil {
		return err
	}
	defer cl.Close()
	p := &asyncProducer{cl: cl}
	env := so.env()
	if so.heapDir != "" {
		env = append(env, "EFFECTIVELY_HTTP_PPROF=true") // on the worker's localhost address
	}
	w, err := b.startWorker(d, group, topic, env...)
	if err != nil {
		return err
	}
	defer w.stop(time.Minute)
	if err := w.waitReady(ctx, time.Minute); err != nil {
		return err
	}

	start := time.Now()
	snap := takeCPUSnapshot()
	prev, err := b.soakSample(ctx, w, d, group, topic, p, rep.table, start)
	if err != nil {
		return err
	}
	rep.points = append(rep.points, prev)

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	paced := make(chan error, 1)
	var took time.Duration
	go func() {
		var err error
		took, err = pace(pctx, gen, p, rep.rate, rep.events, fmt.Sprintf("soak: paced producer for %s (warm-up %s)", total, so.warmup))
		paced <- err
	}()
	tick := time.NewTicker(so.sample)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			// Interrupted: report what was sampled.
			rep.interrupted = true
			progress("soak: interrupted after %s; reporting the samples taken", prev.elapsed.Round(time.Second))
			return nil
		case err := <-paced:
			if err != nil {
				return fmt.Errorf("the paced producer: %w", err)
			}
			done = true
		case <-tick.C:
		}
		if done && time.Since(start)-prev.elapsed < so.sample/2 {
			break // the last tick was a moment ago: no window worth a row
		}
		if w.exited() {
			return w.failed(errors.New("the soak worker exited"))
		}
		s, err := b.soakSample(ctx, w, d, group, topic, p, rep.table, start)
		if err != nil {
			return err
		}
		next := takeCPUSnapshot()
		s.window(prev, cpuBetween(snap, next), w.cmd.Process.Pid, b)
		snap, prev = next, s
		rep.points = append(rep.points, s)
		if rep.heapStart == "" && so.heapDir != "" && so.measured(s.elapsed) {
			rep.heapStart = b.heapProfile(ctx, w, rep.topic, "start")
		}
		progress("soak %s/%s: offered %.0f/s, applied %.0f/s, p99 %s, RSS %.0f MiB (heap %.0f, fetched and not applied %.0f), worker %.2f + PostgreSQL %.2f cores, claims %.1f MiB in %d relation(s), %d live, %d dead, pruned %.0f",
			fmtElapsed(so.clock(s.elapsed)), so.duration, s.offered, s.rate, fmtQuantile(s.p99), mib(s.rss), mib(s.heap), mib(s.buffered), s.workerCPU, s.pgCPU,
			mib(s.claims.bytes), s.claims.rels, s.claims.live, s.claims.dead, s.prunedRows)
	}
	rep.paceTook = took
	if rep.probe {
		progress("soak: the probe's backlog (%d records produced, %d applied) is left: its topic and schema are not the soak's", prev.produced, prev.applied)
		w.stop(time.Minute)
		b.deleteGroup(ctx, group)
		return nil
	}
	if so.heapDir != "" && !rep.interrupted {
		rep.heapEnd = b.heapProfile(ctx, w, rep.topic, "end")
	}

	// Every record applied, then the ledger as generated: retention pruned
	// claims, never effects.
	ended := time.Now()
	if _, _, _, err := w.waitApplied(ctx, d, group, topic, int64(rep.events)); err != nil {
		return fmt.Errorf("draining after the paced run: %w", err)
	}
	rep.drainedIn = time.Since(ended)
	if code := w.stop(time.Minute); code != 0 {
		progress("warning: the soak worker exited with code %d after SIGTERM", code)
	}
	b.deleteGroup(ctx, group)
	problems, err := d.checkLedger(ctx, gen.Expected())
	if err != nil {
		return err
	}
	rep.problems = append(rep.problems, problems...)
	return nil
}

// soakSample reads the cumulative values of one sample.
func (b *bench) soakSample(ctx context.Context, w *worker, d *db, group, topic string, p *asyncProducer, table string, start time.Time) (soakPoint, error) {
	s := soakPoint{elapsed: time.Since(start), produced: p.acked.Load()}
	var err error
	if s.applied, err = d.applied(ctx, group, topic); err != nil {
		return s, fmt.Errorf("reading positions: %w", err)
	}
	metrics, err := scrape(ctx, w.http)
	if err != nil {
		return s, err
	}
	s.hist = histogram(metrics, e2eHistogram, map[string]string{"topic": topic})
	s.pruned = value(metrics, "effectively_pruned_rows_total", nil)
	s.heap = int64(value(metrics, "go_memstats_heap_inuse_bytes", nil))
	s.buffered = int64(value(metrics, "effectively_partition_buffered_bytes", nil) + value(metrics, "effectively_kafka_buffered_fetch_bytes", nil))
	s.extra = map[string]float64{}
	for _, m := range metrics {
		if m.name != "effectively_pruned_rows_total" && prunerMetric.MatchString(m.name) {
			s.extra[m.name] += m.value
		}
	}
	if s.rss, err = currentRSS(w.cmd.Process.Pid); err != nil {
		progress("warning: reading the worker's RSS: %v", err)
	}
	if s.claims, err = d.claimStats(ctx, table); err != nil {
		return s, err
	}
	if s.wal, err = d.walStats(ctx); err != nil {
		return s, err
	}
	return s, nil
}

// window fills the values over the window since prev.
func (s *soakPoint) window(prev soakPoint, u cpuUse, workerPid int, b *bench) {
	secs := (s.elapsed - prev.elapsed).Seconds()
	if secs <= 0 {
		return
	}
	s.rate = float64(s.applied-prev.applied) / secs
	s.offered = float64(s.produced-prev.produced) / secs
	h := subtract(s.hist, prev.hist)
	if len(h) > 0 {
		s.windowObservations = h[len(h)-1].count
	}
	s.p50, s.p99 = quantiles(h)
	wall := u.wall.Seconds()
	s.workerCPU = u.pid(workerPid) / wall
	s.pgCPU = b.pgCPU(u) / wall
	s.benchCPU = u.pid(os.Getpid()) / wall
	if n := s.applied - prev.applied; n > 0 {
		s.workerUs = 1e6 * u.pid(workerPid) / float64(n)
		s.pgUs = 1e6 * b.pgCPU(u) / float64(n)
	}
	wal := windowWAL(prev, *s)
	s.walPerEvent, s.fpiPerEvent = wal.bytes, wal.fpi
	s.checkpoints = s.wal.checkpoints - prev.wal.checkpoints
	// A dropped generation takes its counts with it: a negative change is
	// that, not vacuums undone.
	s.autovacuums = max(0, s.claims.autovacuums-prev.claims.autovacuums)
	s.prunedRows = s.pruned - prev.pruned
}

func quantiles(h []bucket) (p50, p99 quantileResult) {
	v, lo, hi, ok := quantile(0.5, h)
	p50 = quantileResult{v, lo, hi, ok}
	v, lo, hi, ok = quantile(0.99, h)
	p99 = quantileResult{v, lo, hi, ok}
	return p50, p99
}

func fmtQuantile(q quantileResult) string {
	if !q.ok {
		return "-"
	}
	return ms(q.v)
}

// soakWindow is the first or the last stretch of the run the summary
// compares.
type soakWindow struct {
	from, to     soakPoint
	rate         float64
	p50, p99     quantileResult
	observations float64
}

// windowOf is the stretch between two samples.
func windowOf(from, to soakPoint) soakWindow {
	w := soakWindow{from: from, to: to}
	if secs := (to.elapsed - from.elapsed).Seconds(); secs > 0 {
		w.rate = float64(to.applied-from.applied) / secs
	}
	h := subtract(to.hist, from.hist)
	if len(h) > 0 {
		w.observations = h[len(h)-1].count
	}
	w.p50, w.p99 = quantiles(h)
	return w
}

// compareSpan is the length of the stretches compared: 5 minutes, or a
// sixth of a run shorter than 30 minutes.
func compareSpan(d time.Duration) (time.Duration, string) {
	if d >= 30*time.Minute {
		return 5 * time.Minute, "5 minutes"
	}
	return d / 6, fmt.Sprintf("sixth (%s: the run is shorter than 30 minutes)", (d / 6).Round(time.Second))
}

// slope is the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / den
}

// trend is the least-squares slope of f over the samples that have it, in
// MiB/hour.
func trend(ps []soakPoint, f func(soakPoint) int64) float64 {
	var xs, ys []float64
	for _, p := range ps {
		if v := f(p); v > 0 {
			xs = append(xs, p.elapsed.Hours())
			ys = append(ys, mib(v))
		}
	}
	return slope(xs, ys)
}

func rssOf(p soakPoint) int64  { return p.rss }
func heapOf(p soakPoint) int64 { return p.heap }

// measuredFrom is the index of the sample the measured run starts at: the
// first at the end of the warm-up (half a sample early for jitter).
func (r *soakReport) measuredFrom() int {
	k := sort.Search(len(r.points), func(k int) bool { return r.opts.soak.measured(r.points[k].elapsed) })
	return min(k, len(r.points)-1)
}

// at is p's time on the report's axis: since the measured run started,
// negative during the warm-up.
func (r *soakReport) at(p soakPoint) string { return fmtElapsed(r.opts.soak.clock(p.elapsed)) }

// spanEnd is the index of the last sample within span of ps[a] (at least
// a+1).
func spanEnd(ps []soakPoint, a int, span time.Duration) int {
	b := a + 1
	for b+1 < len(ps) && ps[b+1].elapsed-ps[a].elapsed <= span {
		b++
	}
	return b
}

// stretches splits ps into consecutive windows of span (the last may be
// shorter) and formats each one's p99; it returns the highest over the
// lowest.
func (r *soakReport) stretches(ps []soakPoint, span time.Duration) ([]string, float64) {
	var parts []string
	lo, hi := math.Inf(1), 0.0
	for a := 0; a < len(ps)-1; {
		b := spanEnd(ps, a, span)
		if w := windowOf(ps[a], ps[b]); w.p99.ok {
			parts = append(parts, fmt.Sprintf("%s→%s %s", r.at(ps[a]), r.at(ps[b]), ms(w.p99.v)))
			lo, hi = min(lo, w.p99.v), max(hi, w.p99.v)
		}
		a = b
	}
	return parts, ratio(hi, lo)
}

// summarize computes the summary lines. The comparisons are over the
// measured run (after the warm-up); the warm-up's own line compares its
// cold start with the measured run's end.
func (r *soakReport) summarize() {
	all := r.points
	m := r.measuredFrom()
	ps := all[m:]
	if len(ps) < 3 {
		r.summaryText = []string{"too few samples for a summary"}
		return
	}
	so := r.opts.soak
	start, end := ps[0].elapsed, ps[len(ps)-1].elapsed
	span, spanName := compareSpan(end - start)
	// The first stretch: from the start to the last sample within span;
	// the last: from the first sample at or after end-span to the end.
	i := spanEnd(ps, 0, span)
	j := len(ps) - 2
	for j-1 > 0 && ps[j-1].elapsed >= end-span {
		j--
	}
	first, last := windowOf(ps[0], ps[i]), windowOf(ps[j], ps[len(ps)-1])
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	add("compared: the first and the last %s of the measured run (samples %s → %s and %s → %s)", spanName,
		r.at(ps[0]), r.at(ps[i]), r.at(ps[j]), r.at(ps[len(ps)-1]))
	add("throughput: first %.0f ev/s, last %.0f ev/s, last/first %.3f (target within 10%%: %s); offered %d ev/s", first.rate, last.rate,
		ratio(last.rate, first.rate), verdict(math.Abs(ratio(last.rate, first.rate)-1) <= 0.10), r.rate)
	if first.p99.ok && last.p99.ok {
		add("p99 latency: first %s, last %s, last/first %.2f (target within 20%%: %s); p50 first %s, last %s",
			ms(first.p99.v), ms(last.p99.v), last.p99.v/first.p99.v, verdict(math.Abs(last.p99.v/first.p99.v-1) <= 0.20), ms(first.p50.v), ms(last.p50.v))
	} else {
		add("p99 latency: no observations in one of the stretches")
	}
	if parts, spread := r.stretches(ps, span); len(parts) > 0 {
		add("p99 by stretch of the measured run: %s; highest/lowest %.2f", strings.Join(parts, ", "), spread)
	}
	if m > 0 {
		// From the cold start: the warm-up's first stretch against the
		// measured run's last, as a run without a warm-up would read.
		k := spanEnd(all[:m], 0, span)
		cold := windowOf(all[0], all[k])
		line := fmt.Sprintf("warm-up: %s at the offered rate before the measured run (samples %s → %s: in the table, not compared)", so.warmup, r.at(all[0]), r.at(all[m]))
		if cold.p99.ok && last.p99.ok {
			line += fmt.Sprintf("; from the cold start (%s → %s) p99 %s and %.0f ev/s, against the measured run's last: p99 last/cold %.2f, throughput %.3f",
				r.at(all[0]), r.at(all[k]), ms(cold.p99.v), cold.rate, last.p99.v/cold.p99.v, ratio(last.rate, cold.rate))
		}
		add("%s", line)
	}
	var rssMax, heapMax int64
	var bufMax soakPoint
	for _, p := range ps {
		rssMax, heapMax = max(rssMax, p.rss), max(heapMax, p.heap)
		if p.buffered > bufMax.buffered {
			bufMax = p
		}
	}
	// Without a warm-up the first sample (t = 0) is the idle worker
	// before any load.
	loaded := ps
	if m == 0 {
		loaded = ps[1:]
	}
	half := ps[len(ps)/2:]
	add("worker RSS: idle at the start %.1f MiB; measured run's first sample %.1f MiB, last %.1f MiB, max %.1f MiB; trend (least squares) %+.1f MiB/hour over the measured run, %+.1f MiB/hour over its second half",
		mib(all[0].rss), mib(loaded[0].rss), mib(ps[len(ps)-1].rss), mib(rssMax), trend(loaded, rssOf), trend(half, rssOf))
	if heapMax > 0 {
		add("worker Go heap in use: first %.1f MiB, last %.1f MiB, max %.1f MiB; trend %+.1f MiB/hour over the measured run, %+.1f MiB/hour over its second half",
			mib(loaded[0].heap), mib(ps[len(ps)-1].heap), mib(heapMax), trend(loaded, heapOf), trend(half, heapOf))
	}
	if bufMax.buffered > 0 {
		add("records fetched and not yet applied (keys and values: effectively_partition_buffered_bytes + effectively_kafka_buffered_fetch_bytes): first %.1f MiB, last %.1f MiB, max %.1f MiB at %s; the queues pause their partitions at %d × %d MiB, and all of them at consumer.max_inflight_bytes (%d MiB)",
			mib(loaded[0].buffered), mib(ps[len(ps)-1].buffered), mib(bufMax.buffered), r.at(bufMax),
			r.opts.partitions, consumer.MaxBufferedBytesDefault>>20, settings.MaxInflightBytesDefault>>20)
	}
	var cmax claimStats
	var cmaxAt soakPoint
	var deadMax int64
	for _, p := range ps {
		if p.claims.bytes > cmax.bytes {
			cmax, cmaxAt = p.claims, p
		}
		deadMax = max(deadMax, p.claims.dead)
	}
	cend := ps[len(ps)-1].claims
	add("claims storage (%s, table + indexes) over the measured run: max %.1f MiB at %s (%d live rows est.), at the end %.1f MiB (%d live rows est., %d relation(s)); dead tuples max %d, at the end %d",
		r.table, mib(cmax.bytes), r.at(cmaxAt), cmax.live, mib(cend.bytes), cend.live, cend.rels, deadMax, cend.dead)
	// Storage one retention period (plus a prune pass) after the first
	// record against the end: bounded storage stays level from there on.
	settle := so.retention + so.pruneInterval
	if end > 2*settle {
		k := sort.Search(len(all), func(k int) bool { return all[k].elapsed >= settle })
		var hi int64
		for _, p := range all[k:] {
			hi = max(hi, p.claims.bytes)
		}
		add("claims storage one retention period + one prune interval after the first record (at %s): %.1f MiB then, max %.1f MiB since, %.1f MiB at the end (end / then %.2f)",
			r.at(all[k]), mib(all[k].claims.bytes), mib(hi), mib(cend.bytes), ratio(float64(cend.bytes), float64(all[k].claims.bytes)))
	} else {
		add("claims storage: the run is shorter than two retention periods (%s): it cannot show a plateau", 2*settle)
	}
	var autovac int64
	vacSamples, hiddenSamples := 0, 0
	var pruned float64
	for _, p := range ps[1:] {
		autovac += p.autovacuums
		pruned += p.prunedRows
		if p.claims.vacuum != "" {
			vacSamples++
		} else if p.claims.hiddenVacuums > 0 {
			hiddenSamples++
		}
	}
	add("autovacuum (measured run): %d autovacuum(s) of the claims relations finished; a vacuum of them was running in %d of %d samples, one hidden from this role (any relation) in %d", autovac, vacSamples, len(ps)-1, hiddenSamples)
	add("pruner (measured run): %.0f rows deleted (all tables, effectively_pruned_rows_total)", pruned)
	for _, name := range r.extraNames {
		add("pruner metric %s: %g at the start, %g at the end", name, all[0].extra[name], ps[len(ps)-1].extra[name])
	}
	var wus, pus []float64
	for _, p := range ps[1:] {
		if p.workerUs > 0 {
			wus, pus = append(wus, p.workerUs), append(pus, p.pgUs)
		}
	}
	if r.heapStart != "" && r.heapEnd != "" {
		add("worker heap profiles (after a GC) at the start and the end of the measured run: go tool pprof -sample_index=inuse_space -top -diff_base %s %s", r.heapStart, r.heapEnd)
	}
	add("CPU per applied event (median over the measured run's samples): worker %.1f µs, PostgreSQL %.1f µs", median(wus), median(pus))
	walFirst, walLast := windowWAL(ps[0], ps[i]), windowWAL(ps[j], ps[len(ps)-1])
	add("WAL per applied event: first %.0f B (%.3f full-page images), last %.0f B (%.3f), last/first %.2f; checkpoints started in the measured run: %d (one per %s)",
		walFirst.bytes, walFirst.fpi, walLast.bytes, walLast.fpi, ratio(walLast.bytes, walFirst.bytes),
		ps[len(ps)-1].wal.checkpoints-ps[0].wal.checkpoints, perCheckpoint(ps))
	if r.interrupted {
		add("INTERRUPTED at %s of %s: no drain and no ledger check", r.at(all[len(all)-1]), so.duration)
	} else {
		add("paced run: %d records offered at %d ev/s in %s (warm-up included); every record applied %s after the producer finished",
			r.events, r.rate, r.paceTook.Round(time.Millisecond), r.drainedIn.Round(time.Millisecond))
	}
	if len(r.problems) == 0 && !r.interrupted {
		add("checks: the maximum's runs (claims = distinct events, ledger totals) and the soak's ledger totals as generated: ok")
	} else {
		for _, p := range r.problems {
			add("PROBLEM: %s", p)
		}
	}
	r.summaryText = lines
}

// walWindow is WAL per applied event over a stretch.
type walWindow struct{ bytes, fpi float64 }

func windowWAL(from, to soakPoint) walWindow {
	n := float64(to.applied - from.applied)
	if n <= 0 {
		return walWindow{}
	}
	return walWindow{float64(to.wal.bytes-from.wal.bytes) / n, float64(to.wal.fpi-from.wal.fpi) / n}
}

// perCheckpoint is the measured run's length over its checkpoints.
func perCheckpoint(ps []soakPoint) string {
	n := ps[len(ps)-1].wal.checkpoints - ps[0].wal.checkpoints
	if n <= 0 {
		return "-"
	}
	return ((ps[len(ps)-1].elapsed - ps[0].elapsed) / time.Duration(n)).Round(time.Second).String()
}

// collectExtras names the pruner metrics any sample had.
func (r *soakReport) collectExtras() {
	seen := map[string]bool{}
	for _, p := range r.points {
		for n := range p.extra {
			seen[n] = true
		}
	}
	r.extraNames = r.extraNames[:0]
	for n := range seen {
		r.extraNames = append(r.extraNames, n)
	}
	slices.Sort(r.extraNames)
}

// header is the run's description, one line per item.
func (r *soakReport) header() [][2]string {
	so := r.opts.soak
	maxLine := fmt.Sprintf("-soak-rate %d given (not measured)", r.rate)
	if r.max > 0 {
		var parts []string
		for _, v := range r.maxRates {
			parts = append(parts, fmt.Sprintf("%.0f", v))
		}
		maxLine = fmt.Sprintf("%.0f ev/s: median of %d run(s) (%s) of the worker with its defaults draining %d pre-produced records of the reference workload (10%% duplicates, 10%% out of order)",
			r.drainMax, len(r.maxRates), strings.Join(parts, ", "), so.events)
		if len(r.sustained) > 0 {
			var sp []string
			for _, v := range r.sustained {
				sp = append(sp, fmt.Sprintf("%.0f", v))
			}
			maxLine = fmt.Sprintf("%.0f ev/s sustained: the median applied rate from %s to %s of a probe offering the drained maximum with the producer in the loop and the soak's retention (%s); drained: %s",
				r.max, fmtElapsed(r.probeFrom), fmtElapsed(so.probe), strings.Join(sp, ", "), maxLine)
		}
	}
	return [][2]string{
		{"started", fmt.Sprintf("%s, wall time %s; load average %s at start, %s at end", r.started.Format(time.RFC3339), r.wall.Round(time.Second), r.loadStart, r.loadEnd)},
		{"worker", fmt.Sprintf("%s %s", r.opts.bin, r.worker)},
		{"maximum", maxLine},
		{"offered", fmt.Sprintf("%d ev/s (%.0f%% of the maximum) for %s after a warm-up of %s: %d records, %d accounts, 10%% duplicates, 10%% out of order, %d partitions, timestamped when handed to the producer",
			r.rate, 100*ratio(float64(r.rate), r.max), so.duration, so.warmup, r.events, r.accounts, r.opts.partitions)},
		{"retention", fmt.Sprintf("dedupe.retention %s, dedupe.prune_interval %s (upstream.max_retry_horizon %s, dedupe.reconciliation_window %s); the rest defaults",
			so.retention, so.pruneInterval, so.retention/4, so.retention/2)},
		{"claims", fmt.Sprintf("table %s: pg_total_relation_size (table + indexes + TOAST) summed over pg_partition_tree; live and dead tuples and autovacuum_count from pg_stat_user_tables; vacuum from pg_stat_progress_vacuum (\"N hidden\": vacuums running on relations this role may not see, autovacuum's without pg_read_all_stats)", r.table)},
		{"sampling", fmt.Sprintf("every %s; t is the time since the measured run started (negative: the warm-up); rates, latency and CPU are over the window since the previous sample; latency is the change of effectively_end_to_end_seconds (produce → commit) between two scrapes; bench cores is this program (the paced producer, generating the workload); the machine's other processes are not shown", so.sample)},
	}
}

// soakColumns are the table's headers.
var soakColumns = []string{"t", "offered ev/s", "applied ev/s", "p50 ms", "p99 ms", "RSS MiB", "heap MiB", "buffered MiB", "worker cores", "PG cores", "bench cores",
	"claims MiB", "index MiB", "rels", "live rows", "dead rows", "autovac", "vacuum", "pruned rows", "WAL B/ev", "FPI/ev", "ckpt"}

func (r *soakReport) cells(p soakPoint) []string {
	q := func(r quantileResult) string {
		if !r.ok {
			return "-"
		}
		return fmt.Sprintf("%.1f", 1000*r.v)
	}
	vac := p.claims.vacuum
	switch {
	case vac == "" && p.claims.hiddenVacuums > 0:
		vac = fmt.Sprintf("%d hidden", p.claims.hiddenVacuums)
	case vac == "":
		vac = "-"
	}
	return []string{
		r.at(p), fmt.Sprintf("%.0f", p.offered), fmt.Sprintf("%.0f", p.rate), q(p.p50), q(p.p99),
		fmt.Sprintf("%.1f", mib(p.rss)), fmt.Sprintf("%.1f", mib(p.heap)), fmt.Sprintf("%.1f", mib(p.buffered)), fmt.Sprintf("%.2f", p.workerCPU), fmt.Sprintf("%.2f", p.pgCPU), fmt.Sprintf("%.2f", p.benchCPU),
		fmt.Sprintf("%.1f", mib(p.claims.bytes)), fmt.Sprintf("%.1f", mib(p.claims.indexBytes)), fmt.Sprint(p.claims.rels),
		fmt.Sprint(p.claims.live), fmt.Sprint(p.claims.dead), fmt.Sprint(p.autovacuums), vac, fmt.Sprintf("%.0f", p.prunedRows),
		fmt.Sprintf("%.0f", p.walPerEvent), fmt.Sprintf("%.3f", p.fpiPerEvent), fmt.Sprint(p.checkpoints),
	}
}

func fmtElapsed(d time.Duration) string {
	sign := ""
	if d = d.Round(time.Second); d < 0 {
		sign, d = "-", -d
	}
	return fmt.Sprintf("%s%d:%02d", sign, int(d.Minutes()), int(d.Seconds())%60)
}

// output prints the report and writes its markdown and plot.
func (r *soakReport) output(out *os.File) error {
	r.collectExtras()
	r.summarize()
	r.print(out)
	so := r.opts.soak
	if so.report != "" {
		if err := writeFile(so.report, []byte(r.markdown())); err != nil {
			return fmt.Errorf("writing the soak report: %w", err)
		}
		fmt.Fprintf(out, "\nwrote %s\n", so.report)
	}
	if so.plot != "" {
		png, err := r.plot()
		if err != nil {
			return fmt.Errorf("plotting: %w", err)
		}
		if err := writeFile(so.plot, png); err != nil {
			return fmt.Errorf("writing the soak plot: %w", err)
		}
		fmt.Fprintf(out, "wrote %s\n", so.plot)
	}
	return nil
}

func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func (r *soakReport) print(out *os.File) {
	fmt.Fprintf(out, "effectively soak (make soak): prints, never asserts\n\n")
	for _, h := range r.header() {
		fmt.Fprintf(out, "%-10s %s\n", h[0], h[1])
	}
	fmt.Fprintln(out)
	rows := [][]string{soakColumns}
	for _, p := range r.points[1:] {
		rows = append(rows, r.cells(p))
	}
	widths := make([]int, len(soakColumns))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for _, row := range rows {
		var sb strings.Builder
		for i, c := range row {
			if i > 0 {
				sb.WriteString("  ")
			}
			fmt.Fprintf(&sb, "%*s", widths[i], c)
		}
		fmt.Fprintln(out, strings.TrimRight(sb.String(), " "))
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "summary")
	for _, l := range r.summaryText {
		fmt.Fprintf(out, "  %s\n", l)
	}
}

func (r *soakReport) markdown() string {
	var sb strings.Builder
	sb.WriteString("# Soak: `make soak`\n\n")
	sb.WriteString("Generated by `make soak` (test/bench -soak); see [Benchmarks](benchmarks.md#soak-make-soak) for what it does and how to read it.\n\n")
	if so := r.opts.soak; so.plot != "" {
		rel, err := filepath.Rel(filepath.Dir(so.report), so.plot)
		if err != nil {
			rel = so.plot
		}
		fmt.Fprintf(&sb, "![soak plot](%s)\n\n", filepath.ToSlash(rel))
	}
	for _, h := range r.header() {
		fmt.Fprintf(&sb, "- **%s**: %s\n", h[0], h[1])
	}
	sb.WriteString("\n## Summary\n\n")
	for _, l := range r.summaryText {
		fmt.Fprintf(&sb, "- %s\n", l)
	}
	sb.WriteString("\n## Samples\n\n")
	sb.WriteString("| " + strings.Join(soakColumns, " | ") + " |\n")
	sb.WriteString("|" + strings.Repeat("---:|", len(soakColumns)) + "\n")
	for _, p := range r.points[1:] {
		sb.WriteString("| " + strings.Join(r.cells(p), " | ") + " |\n")
	}
	return sb.String()
}

// heapProfile writes the worker's heap profile, after a GC, to
// -soak-heap-dir and returns its path ("" when it failed: a warning, the
// soak goes on).
func (b *bench) heapProfile(ctx context.Context, w *worker, topic, when string) string {
	path := filepath.Join(b.opts.soak.heapDir, fmt.Sprintf("%s-heap-%s.pb.gz", topic, when))
	err := func() error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.http+"/debug/pprof/heap?gc=1", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		return writeFile(path, body)
	}()
	if err != nil {
		progress("warning: the worker's heap profile (%s): %v", when, err)
		return ""
	}
	progress("soak: the worker's heap profile at the %s of the measured run: %s", when, path)
	return path
}

// workerVersion is `bin/effectively version`.
func (b *bench) workerVersion(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, b.bin, "version").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func ptr[T any](v T) *T { return &v }
