package service

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/effectively-io/effectively/config"
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
