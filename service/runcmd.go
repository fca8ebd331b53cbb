package service

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	"github.com/twmb/franz-go/plugin/kzap"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/internal/broker"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/deadletter"
	"github.com/effectively-io/effectively/internal/dedupe"
	"github.com/effectively-io/effectively/internal/handling"
	"github.com/effectively-io/effectively/internal/httpserver"
	"github.com/effectively-io/effectively/internal/outbox"
	"github.com/effectively-io/effectively/internal/pipeline"
	"github.com/effectively-io/effectively/internal/tracing"
	"github.com/effectively-io/effectively/schema"
)

func newRunCmd(c *CLI) *cobra.Command {
	var migrate bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the worker: join the consumer group and apply events until SIGINT/SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w, err := newWorker(c.app, c.cfg, WorkerOptions{Logger: c.log, Migrate: migrate}, true)
			if err != nil {
				return err
			}
			return w.Run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&migrate, "migrate", false, "apply pending schema migrations before starting")
	return cmd
}

// runWorker wires the worker: database pool, consumer group member, HTTP
// endpoints. It returns when ctx is cancelled and everything has drained.
func (a *App) runWorker(ctx context.Context, w *Worker) error {
	cfg, log, migrate := w.cfg, w.log, w.opts.Migrate
	// Every line of a worker says whose it is: which group, which member,
	// which build.
	log = log.With(zap.String("group", cfg.Kafka.Group), zap.String("instance_id", cfg.Kafka.InstanceID), zap.String("version", buildVersion(a.Version)))
	warnPostgresTLS(log, cfg.Postgres.URL)
	if migrate {
		if err := checkPostgres(ctx, cfg.Postgres.URL); err != nil {
			return err
		}
		if _, err := schema.Migrate(ctx, cfg.Postgres.URL, log.Named("migrate"), a.schemaSets(cfg)...); err != nil {
			return explainMigratePrivilege(cfg.Postgres.URL, err)
		}
	}

	var tr *tracing.Tracing
	if tp := w.opts.TracerProvider; tp != nil {
		tr = tracing.WithProvider(tp) // the program's: it exports and shuts it down
	} else {
		var err error
		if tr, err = newTracing(ctx, a, cfg, log); err != nil {
			return err
		}
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tr.Shutdown(sctx); err != nil {
			log.Warn("tracing: flushing the last spans failed", zap.Error(err))
		}
	}()

	reg, gatherer := w.opts.Registerer, w.opts.Gatherer
	if reg == nil {
		own := prometheus.NewRegistry()
		own.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg, gatherer = own, own
	} else {
		// The program's registry outlives the worker: what the worker
		// registered goes when Run returns, so a new Worker (a retry after
		// a failed start) registers again.
		rec := &registered{Registerer: reg}
		defer rec.unregister()
		reg = rec
	}
	kmetrics := kprom.NewMetrics("effectively_kafka", kprom.Registerer(reg), kprom.Gatherer(gatherer))
	metrics := engineMetrics(reg)
	metrics.build.WithLabelValues(buildVersion(a.Version), runtime.Version(), a.name()).Set(1)
	reasons := a.allReasons()
	codes := make([]event.Reason, len(reasons))
	for i, r := range reasons {
		codes[i] = r.Reason
	}
	for _, t := range cfg.Kafka.Topics {
		metrics.pipeline.InitTopic(t, codes)
	}

	// The database, then the broker and the topics: their partition counts
	// size the pool (one connection per partition this member may own).
	if err := a.checkSchema(ctx, cfg); err != nil {
		return err
	}
	counts, err := probeKafka(ctx, cfg, log)
	if err != nil {
		return err
	}
	partitions := 0
	for _, n := range counts {
		partitions += n
	}
	pool, err := openPool(ctx, cfg.Postgres, partitions, tr.PostgresTracer())
	if err != nil {
		return err
	}
	defer pool.Close()

	applier, err := a.newApplier(ctx, cfg, pool, log, metrics.pipeline, tr)
	if err != nil {
		return err
	}
	if !a.handlersServe(cfg) {
		log.Info("this configuration consumes none of the build's topics, and its sinks take every topic it consumes: running as a config-only sink (the build's handlers, tables, targets and migrations are left out)",
			zap.Strings("build_topics", a.topics), zap.Strings("topics", cfg.Kafka.Topics))
	}
	for _, name := range handling.Of(a.registry(cfg)).Targets() {
		if t := cfg.Targets[name]; t.URL == "" {
			log.Info("a target of this build has no URL: side effects to it are off (a handler that requires it dead-letters its events as target_unconfigured)",
				zap.String("target", name), zap.String("fix", "set targets."+name+".url / "+config.EnvName("targets."+name+".url")))
		}
	}
	changed, err := dedupe.RecordPartitionCounts(ctx, pool, counts)
	if err != nil {
		return err
	}
	for _, ch := range changed {
		consumer.WarnPartitionCount(log, ch.Topic, ch.Was, ch.Now)
	}
	kopts, err := broker.ClientOpts(cfg.Kafka, log.Named("kafka"))
	if err != nil {
		return err
	}
	copts := consumerOptions(cfg, log, metrics.consumer, kmetrics)
	copts.ExtraOpts = kopts
	copts.Hooks = append(copts.Hooks, tr.KafkaHooks(cfg.Kafka.Group)...)
	copts.OnPartitionCount = func(topic string, n int) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := dedupe.RecordPartitionCounts(ctx, pool, map[string]int{topic: n}); err != nil {
			log.Warn("recording the topic's new partition count failed; the next start warns again", zap.String("topic", topic), zap.Error(err))
		}
	}
	cons, err := consumer.New(copts, tr.Applier(applier))
	if err != nil {
		return err
	}
	cons.Topics(counts, checkedTopics(cfg))

	// Off by default: then nil, nil, and nothing is mounted or sampled.
	consoleHandler, history, err := a.newConsole(cfg, log, pool, gatherer)
	if err != nil {
		cons.Close()
		return err
	}
	hopts := httpserver.Options{
		Pprof:   cfg.HTTP.Pprof,
		Console: consoleHandler,
		Status: func(ctx context.Context) any {
			return a.workerStatus(ctx, cfg, pool, cons)
		},
	}
	probe := newPGProbe(pool)
	defer probe.Close()
	deps := newDependencies(metrics.dependencies, log,
		dependency{"postgres", probe.Ping}, dependency{"kafka", cons.Ping})
	var srv *httpserver.Server
	switch {
	case w.opts.Mux != nil:
		// The program serves the routes on its own server.
		if err := mount(w.opts.Mux, gatherer, readinessChecks(deps, cons), hopts); err != nil {
			cons.Close()
			return err
		}
	case cfg.HTTP.Addr != "":
		srv, err = httpserver.New(cfg.HTTP.Addr, gatherer, readinessChecks(deps, cons), log.Named("http"), hopts)
		if err != nil {
			cons.Close()
			return fmt.Errorf("http.addr %s: %w; fix: free the port or set http.addr / %s", cfg.HTTP.Addr, err, config.EnvName("http.addr"))
		}
		srv.Start()
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Stop(sctx)
		}()
	}

	sweeper := pipeline.NewSweeper(pool, applier, pipeline.SweeperOptions{
		MaxAge: cfg.Parking.MaxAge, MaxAttempts: cfg.Parking.MaxAttempts, Logger: log.Named("parking"),
		// A sweep loads its due events whole: bound them to about
		// sweepBytes of records (64 at the default 1 MiB max payload).
		BatchSize: max(1, min(500, sweepBytes/max(1, cfg.Consumer.MaxPayloadBytes))),
	})
	dlqTopics := make(map[string]string, len(cfg.Kafka.Topics))
	for _, t := range cfg.Kafka.Topics {
		dlqTopics[t] = cfg.TopicSettings(t).DLQ
	}
	relay, err := deadletter.NewRelay(pool, deadletter.RelayOptions{
		DLQTopics: dlqTopics, Brokers: cfg.Kafka.Brokers,
		RetryInitial: cfg.Retry.Initial, RetryMax: cfg.Retry.Max,
		TransactionalID: relayTransactionalID(cfg),
		Logger:          log.Named("dlq_relay"),
		Hooks:           tr.KafkaHooks(""),
		ExtraOpts:       kopts,
	})
	if err != nil {
		cons.Close()
		return err
	}
	pruner, err := newPruner(pool, cfg, log, metrics.pruner)
	if err != nil {
		cons.Close()
		return err
	}
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	background := []func(context.Context) error{deps.Run, sweeper.Run, relay.Run, pruner.Run}
	if history != nil {
		background = append(background, history.Run)
	}
	if a.anyTargetConfigured(cfg) {
		// Side effects leave through the outbox: intents were recorded with
		// their effects; the dispatcher delivers them. Without a configured
		// target no intent can be recorded, and nothing polls the outbox.
		background = append(background, outbox.NewDispatcher(pool, outbox.Options{
			RetryInitial: cfg.Retry.Initial, RetryMax: cfg.Retry.Max, Concurrency: cfg.Outbox.Concurrency,
			Timeout: cfg.Outbox.CallTimeout, LeaseGrace: cfg.Outbox.LeaseGrace,
			MaxAttempts: cfg.Outbox.MaxAttempts, MaxAge: cfg.Outbox.MaxAge, Targets: endpoints(cfg),
			Logger: log.Named("outbox"), Metrics: metrics.outbox, WrapTransportFunc: wrapTransport(tr),
		}).Run)
	}
	for _, run := range background {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = run(bg)
		}()
	}
	// Background work stops after the consumer has drained.
	defer func() {
		stopBackground()
		wg.Wait()
	}()

	log.Info("worker started",
		zap.Strings("brokers", cfg.Kafka.Brokers), zap.String("group", cfg.Kafka.Group),
		zap.Strings("topics", cfg.Kafka.Topics), zap.String("postgres", pgAddr(cfg.Postgres.URL)),
		zap.String("http_addr", cfg.HTTP.Addr), zap.String("group_protocol", cfg.Kafka.GroupProtocol),
		zap.String("instance_id", cfg.Kafka.InstanceID))
	err = cons.Run(ctx)
	log.Info("worker stopped")
	return err
}

// endpoints are the configured targets as the dispatcher resolves them at
// each delivery.
func endpoints(cfg config.Config) map[string]outbox.Endpoint {
	out := make(map[string]outbox.Endpoint, len(cfg.Targets))
	for name, t := range cfg.Targets {
		ep := outbox.Endpoint{URL: t.URL, BearerTokenFile: t.BearerTokenFile, CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile}
		for _, h := range t.HeaderFiles {
			if k, file, ok := strings.Cut(h, "="); ok {
				if ep.HeaderFiles == nil {
					ep.HeaderFiles = map[string]string{}
				}
				ep.HeaderFiles[strings.TrimSpace(k)] = file
			}
		}
		out[name] = ep
	}
	return out
}

// sweepBytes bounds the parked events one sweep loads, by their records'
// largest size (consumer.max_payload_bytes).
const sweepBytes = 64 << 20

// anyTargetConfigured reports whether a declared target has a URL.
func (a *App) anyTargetConfigured(cfg config.Config) bool {
	for _, name := range handling.Of(a.registry(cfg)).Targets() {
		if cfg.Targets[name].URL != "" {
			return true
		}
	}
	return false
}

// env resolves the build's targets against the configuration.
func (a *App) env(cfg config.Config) handlers.Env {
	// Prefetchers read from a target with its credentials and TLS settings,
	// as the outbox calls it.
	env := handling.Of(a.registry(cfg)).Env(endpoints(cfg), outbox.Expiry{Retention: cfg.Outbox.Retention, ResendExpired: cfg.Outbox.ResendExpired}, nil, cfg.Prefetch.MaxAttempts)
	return env
}

// probeKafka checks, with a short-lived client, that the brokers answer and
// the topics exist, and returns the topics' partition counts.
func probeKafka(ctx context.Context, cfg config.Config, log *zap.Logger) (map[string]int, error) {
	cl, err := newKafkaClient(cfg, log.Named("kafka"), kgo.WithLogger(kzap.New(log.Named("kafka"), kzap.Level(kgo.LogLevelWarn))))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	counts, err := checkKafka(ctx, cl, cfg.Kafka, cfg.Kafka.Topics)
	if err != nil {
		return nil, err
	}
	return counts, checkAccess(ctx, cl, cfg)
}

// newDecoders builds each topic's decoder from its settings and logs the
// start-up warnings (the content-hash key strategy's collisions).
func newDecoders(cfg config.Config, log *zap.Logger) (map[string]*event.Decoder, error) {
	decoders := make(map[string]*event.Decoder, len(cfg.Kafka.Topics))
	var registry event.SchemaRegistry
	for _, name := range cfg.Kafka.Topics {
		t := cfg.TopicSettings(name)
		dc := event.DecoderConfig{
			Topic: name, Format: t.Format, KeyStrategy: t.KeyStrategy, KeyPointer: t.KeyPointer, NaturalKey: t.NaturalKey,
			IDPointer: t.IDPointer, TypePointer: t.TypePointer, SubjectPointer: t.SubjectPointer, VersionPointer: t.VersionPointer,
			MaxPayloadBytes: cfg.Consumer.MaxPayloadBytes, RequireSubject: t.RequireSubject,
		}
		// Change events may come from a registry converter too, when a
		// registry is configured.
		if config.IsRegistryFormat(t.Format) || (t.Format == config.FormatDebezium && cfg.SchemaRegistry.URL != "") {
			if registry == nil {
				cl, err := broker.SchemaRegistry(cfg.SchemaRegistry, "effectively", log.Named("schema_registry"))
				if err != nil {
					return nil, err
				}
				registry = cl
			}
			dc.Registry = registry
		}
		d, err := event.NewDecoder(dc)
		if err != nil {
			return nil, fmt.Errorf("topic %s: %w", name, err)
		}
		for _, w := range d.Warnings() {
			log.Warn(w, zap.String("topic", name))
		}
		decoders[name] = d
	}
	return decoders, nil
}

// checkedTopics are the topics whose records are
// checked against murmur2 of their key.
func checkedTopics(cfg config.Config) []string {
	var out []string
	for _, t := range cfg.Kafka.Topics {
		if cp := cfg.TopicSettings(t).CheckPartitioner; cp != nil && *cp {
			out = append(out, t)
		}
	}
	return out
}

func consumerOptions(cfg config.Config, log *zap.Logger, m *consumer.Metrics, kmetrics *kprom.Metrics) consumer.Options {
	k := cfg.Kafka
	return consumer.Options{
		Brokers:                k.Brokers,
		Group:                  k.Group,
		Topics:                 k.Topics,
		InstanceID:             k.InstanceID,
		GroupProtocol:          k.GroupProtocol,
		StartOffset:            k.StartOffset,
		OffsetOutOfRange:       k.OffsetOutOfRange,
		MetadataMaxAge:         k.MetadataMaxAge,
		SessionTimeout:         k.SessionTimeout,
		RebalanceTimeout:       k.RebalanceTimeout,
		ClientID:               k.ClientID,
		FetchMaxBytes:          k.FetchMaxBytes,
		FetchMaxPartitionBytes: k.FetchMaxPartitionBytes,
		BatchMaxRecords:        cfg.Consumer.BatchMaxRecords,
		BatchLinger:            cfg.Consumer.BatchLinger,
		MaxInflightBytes:       int64(cfg.Consumer.MaxInflightBytes),
		RevokeTimeout:          cfg.Consumer.RevokeTimeout,
		DrainTimeout:           cfg.Shutdown.DrainTimeout,
		LeaveOnShutdown:        k.LeaveOnShutdown,
		RetryInitial:           cfg.Retry.Initial,
		RetryMax:               cfg.Retry.Max,
		Logger:                 log.Named("consumer"),
		Metrics:                m,
		Hooks:                  []kgo.Hook{kmetrics},
	}
}

// newApplier builds the worker's pipeline for cfg's topics: their decoders,
// the reference handlers, the parking bounds. It refuses a changed key
// strategy as the worker does.
func (a *App) newApplier(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, log *zap.Logger, metrics *pipeline.Metrics, tr *tracing.Tracing) (*pipeline.Applier, error) {
	decoders, err := newDecoders(cfg, log)
	if err != nil {
		return nil, err
	}
	strategies := make(map[string]string, len(cfg.Kafka.Topics))
	for _, t := range cfg.Kafka.Topics {
		strategies[t] = cfg.TopicSettings(t).KeyStrategy
	}
	if err := dedupe.RecordStrategies(ctx, pool, strategies); err != nil {
		return nil, err
	}
	if err := a.checkTables(ctx, cfg, pool); err != nil {
		return nil, err
	}
	reg, env := a.registry(cfg), a.env(cfg)
	if tr.Enabled() {
		// A span per event's handling and per prefetch call.
		reg = handling.Of(a.registry(cfg)).Wrapped(tr.WrapHandler)
		env = handling.WrapTransport(env, tr.WrapTransport)
	}
	return pipeline.NewApplier(pool, pipeline.Options{
		Decoders:             decoders,
		Handlers:             reg,
		Env:                  env,
		Logger:               log.Named("pipeline"),
		Metrics:              metrics,
		MaxParkedPerResource: cfg.Parking.MaxPerResource,
		SettledFunc:          tr.Settled(),
		MaxDecodedBytes:      int64(cfg.Consumer.MaxInflightBytes) / 2,
	}), nil
}

// newTracing turns tracing on when an OTEL_* exporter variable asks for it
// (see package tracing): service.name is the build's name.
func newTracing(ctx context.Context, a *App, cfg config.Config, log *zap.Logger) (*tracing.Tracing, error) {
	instance := cfg.Kafka.InstanceID
	if instance == "" {
		instance, _ = os.Hostname()
	}
	tr, err := tracing.New(ctx, tracing.Options{
		ServiceName: a.name(), Version: buildVersion(a.Version), InstanceID: instance, Logger: log.Named("tracing"),
	})
	if err != nil {
		return nil, UsageError(err)
	}
	if tr.Enabled() {
		log.Info("tracing on: exporting spans over OTLP/HTTP (OTEL_* variables)")
	}
	return tr, nil
}

// wrapTransport is the outbox's WrapTransportFunc: nil when tracing is off.
func wrapTransport(tr *tracing.Tracing) func(http.RoundTripper) http.RoundTripper {
	if !tr.Enabled() {
		return nil
	}
	return tr.WrapTransport
}

// mount registers the worker's routes on a program's mux; a route the mux
// has already (another worker's) is an error, not a panic.
func mount(mux *http.ServeMux, gatherer prometheus.Gatherer, checks []httpserver.Check, opts httpserver.Options) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = UsageError(fmt.Errorf("WorkerOptions.Mux: %v; fix: give each Worker a mux of its own (a mux keeps the routes of a Worker that has returned)", r))
		}
	}()
	httpserver.Mount(mux, gatherer, checks, opts)
	return nil
}

// registered is a program's Registerer that remembers what the worker
// registered on it, to unregister it when the worker returns.
type registered struct {
	prometheus.Registerer
	mu         sync.Mutex
	collectors []prometheus.Collector
}

func (r *registered) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	r.collectors = append(r.collectors, c)
	r.mu.Unlock()
	return nil
}

func (r *registered) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *registered) unregister() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.collectors {
		r.Registerer.Unregister(c)
	}
	r.collectors = nil
}
