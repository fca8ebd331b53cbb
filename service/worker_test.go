package service

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/handling"
)

// A program's own logger hears the worker's lines with the credentials of
// their URLs hidden: in the message and in string, stringer and error
// fields, and in fields given to With.
func TestWorkerLoggerRedacts(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	log := redactingLogger(zap.New(core)).With(zap.String("dsn", "postgres://app:hunter2@db:5432/x"))
	log.Info("cannot reach postgres://app:hunter2@db:5432/x",
		zap.String("url", "https://api.example.com/v1?api_key=hunter2"),
		zap.Error(errors.New(`Get "https://u:hunter2@api.example.com/": refused`)),
		zap.Stringer("target", stringer("https://api.example.com/?token=hunter2")))
	require.Equal(t, 1, logs.Len())
	e := logs.All()[0]
	text := e.Message
	for k, v := range e.ContextMap() {
		text += " " + k + "=" + toString(v)
	}
	require.NotContains(t, text, "hunter2")
	require.Contains(t, text, "db:5432", "only the credentials go: %s", text)
}

// The program's core decides what is written — its level, its sampling,
// its hooks — as it would for its own lines.
func TestWorkerLoggerKeepsTheProgramsCore(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	hooked := 0
	sampled := zapcore.NewSamplerWithOptions(core, time.Hour, 2, 0) // the first 2 of each message, then none
	log := redactingLogger(zap.New(sampled, zap.Hooks(func(zapcore.Entry) error { hooked++; return nil })))
	for range 5 {
		log.Warn("postgres://u:hunter2@db/x is slow")
		log.Info("below the program's level")
	}
	require.Equal(t, 2, logs.Len(), "the sampler's decision")
	require.Equal(t, "postgres://u:xxxxx@db/x is slow", logs.All()[0].Message)
	require.Equal(t, 2, hooked, "the program's hooks ran for what was written")
}

type stringer string

func (s stringer) String() string { return string(s) }

func toString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case error:
		return v.Error()
	}
	return ""
}

// NewWorker refuses what would fail later: a configuration key out of
// range (named), a Registerer it cannot serve; and a Worker runs once.
func TestNewWorkerRefusesWhatWouldFailLater(t *testing.T) {
	app := New("w")
	valid := config.Default()
	valid.Kafka.Topics = []string{"orders"}
	cfg := valid
	cfg.Consumer.BatchMaxRecords = 0
	_, err := NewWorker(app, cfg, WorkerOptions{})
	require.ErrorContains(t, err, "consumer.batch_max_records")
	require.Equal(t, ExitUsage, ExitCode(err))

	_, err = NewWorker(app, valid, WorkerOptions{Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"w": "1"}, prometheus.NewRegistry())})
	require.ErrorContains(t, err, "WorkerOptions.Gatherer")
	_, err = NewWorker(nil, valid, WorkerOptions{})
	require.ErrorContains(t, err, "App")

	w, err := NewWorker(app, valid, WorkerOptions{Logger: zap.NewNop()})
	require.NoError(t, err)
	w.started.Store(true) // as if Run had been called
	err = w.Run(context.Background())
	require.True(t, strings.Contains(err.Error(), "has run already"), err)
}

// The reference build leaves its handlers out only for a configuration
// that consumes none of its topics and whose sinks, each naming its topic,
// take every topic consumed; anything else keeps them.
func TestHandlersServeUnlessSinksTakeEveryTopic(t *testing.T) {
	app := New("ref")
	app.Topics("billing")
	sink := func(topic string) config.Sink { return config.Sink{Name: "s-" + topic, Topic: topic} }
	for _, c := range []struct {
		topics []string
		sinks  []config.Sink
		serve  bool
	}{
		{[]string{"billing"}, nil, true},
		{[]string{"prod.billing"}, nil, true},                                           // a renamed topic, no sinks
		{[]string{"shop"}, []config.Sink{sink("shop")}, false},                          // the stock binary as a sink
		{[]string{"shop", "billing"}, []config.Sink{sink("shop")}, true},                // one of the build's topics
		{[]string{"shop", "prod.billing"}, []config.Sink{sink("shop")}, true},           // a topic no sink takes
		{[]string{"prod.billing"}, []config.Sink{sink("prod.billing"), sink("")}, true}, // a topic-less sink never turns handlers off
	} {
		cfg := config.Default()
		cfg.Kafka.Topics, cfg.Sinks = c.topics, c.sinks
		require.Equal(t, c.serve, app.handlersServe(cfg), "%v %v", c.topics, c.sinks)
		require.Equal(t, c.serve, app.registry(cfg) == &app.Registry)
	}
	require.True(t, New("team").handlersServe(config.Config{Sinks: []config.Sink{sink("x")}}), "a build that names no topics always runs its handlers")
}

// A Worker that fails to start (PostgreSQL unreachable) leaves the
// program's registry as it found it: a retry with a new Worker on the same
// registry fails the same way instead of panicking on a duplicate metric.
func TestWorkerRetryAfterAFailedStart(t *testing.T) {
	app := New("w")
	cfg := config.Default()
	cfg.Kafka.Topics = []string{"orders"}
	cfg.HTTP.Addr = ""
	cfg.Postgres.URL = "postgres://u:p@127.0.0.1:1/db?connect_timeout=2"
	reg := prometheus.NewRegistry()
	before, err := reg.Gather()
	require.NoError(t, err)
	for range 2 {
		w, err := NewWorker(app, cfg, WorkerOptions{Logger: zap.NewNop(), Registerer: reg})
		require.NoError(t, err)
		err = w.Run(context.Background())
		require.ErrorContains(t, err, "127.0.0.1:1")
		after, err := reg.Gather()
		require.NoError(t, err)
		require.Len(t, after, len(before), "the worker's metrics are gone with it")
	}
}

// `dlq redrive` (and the console's redrive) re-applies a config-only
// sink's dead letters with the sink's handler: the pipeline it builds has
// the configured sinks, not only the build's handlers.
func TestRedriveHasTheSinks(t *testing.T) {
	app := New("ref")
	app.Topics("billing")
	cfg := config.Default()
	cfg.Kafka.Topics = []string{"shop"}
	cfg.Sinks = []config.Sink{{Name: "orders", Topic: "shop", Types: []string{"order.updated"}, Table: "orders", Mode: config.SinkInsert,
		Key: []string{"id"}, Columns: []config.SinkColumn{{Name: "id", From: "subject"}}}}
	require.NoError(t, cfg.Validate())
	_, err := app.redriveApplier(cfg, nil, zap.NewNop())
	require.NoError(t, err)
	_, ok := handling.Of(app.registry(cfg)).Handler("order.updated")
	require.True(t, ok, "the sink's handler is registered for the redrive")
}
