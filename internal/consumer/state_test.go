package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/deadline"
)

func TestRetryCause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&pgconn.PgError{Code: "08006"}, consumer.CausePostgresUnavailable},
		{&pgconn.PgError{Code: "57P01"}, consumer.CausePostgresUnavailable},
		{&pgconn.PgError{Code: "53300"}, consumer.CausePostgresUnavailable},
		{&pgconn.PgError{Code: "57014"}, consumer.CausePostgresTimeout},
		{&pgconn.PgError{Code: "55P03"}, consumer.CausePostgresTimeout},
		{&pgconn.PgError{Code: "40001"}, consumer.CauseOther},
		{&pgconn.PgError{Code: "42501"}, consumer.CauseOther},
		{fmt.Errorf("beginning transaction: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), consumer.CausePostgresUnavailable},
		{fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), consumer.CausePostgresUnavailable},
		{fmt.Errorf("query: %w", context.DeadlineExceeded), consumer.CausePostgresTimeout},
		// No answer within postgres.answer_timeout: the link, not a statement.
		{fmt.Errorf("committing: %w", &deadline.TimeoutError{After: 5 * time.Second, Peer: "PostgreSQL"}), consumer.CausePostgresUnavailable},
		{fmt.Errorf("committing: %w", kerr.NotCoordinator), consumer.CauseKafka},
		{consumer.WithRetryCause(consumer.CauseSourceUnavailable, fmt.Errorf("prefetching: %w", io.ErrUnexpectedEOF)), consumer.CauseSourceUnavailable},
		{fmt.Errorf("applying: %w", consumer.WithRetryCause(consumer.CauseSourceUnavailable, errors.New("502"))), consumer.CauseSourceUnavailable},
		{errors.New("a handler's transient error"), consumer.CauseOther},
	} {
		require.Equal(t, tc.want, consumer.RetryCause(tc.err), "%v", tc.err)
	}
	require.NoError(t, consumer.WithRetryCause(consumer.CauseKafka, nil))
}

// switchApplier fails every batch while down is set, with a refused
// connection (PostgreSQL down), and applies otherwise.
type switchApplier struct {
	*memApplier
	down atomic.Bool
}

func (s *switchApplier) Apply(ctx context.Context, b consumer.Batch) error {
	if s.down.Load() {
		return fmt.Errorf("beginning transaction: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	}
	return s.memApplier.Apply(ctx, b)
}

// While every batch fails, the partition is retrying with cause
// postgres_unavailable, and its lag, recomputed on the timer from the end
// offsets, rises with what arrives though nothing commits; once batches
// apply again, it is running with no lag. (kfake: fast and deterministic.)
func TestStateAndLagWhileApplyFails(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	require.NoError(t, err)
	defer cluster.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("t"))
	require.NoError(t, err)
	defer prod.Close()
	send := func(n int) {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Value: []byte("v")}
		}
		require.NoError(t, prod.ProduceSync(context.Background(), recs...).FirstErr())
	}

	reg := prometheus.NewRegistry()
	a := &switchApplier{memApplier: newMemApplier()}
	c, err := consumer.New(withDefaults(consumer.Options{
		Brokers: cluster.ListenAddrs(), Group: "g", Topics: []string{"t"},
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 5 * time.Second,
		RetryInitial: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, LagInterval: 50 * time.Millisecond,
		Logger: zaptest.NewLogger(t), Metrics: consumer.NewMetrics(reg),
	}), a)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	send(10)
	waitFor(t, "the first records applied", func() bool { return a.total() == 10 })
	gauge := func(name, label, value string) float64 {
		return sumGauge(t, reg, name, label, value)
	}
	waitFor(t, "lag 0 and running", func() bool {
		return gauge("effectively_consumer_lag", "", "") == 0 && gauge("effectively_partition_state", "state", "running") == 1
	})

	a.down.Store(true)
	send(25)
	waitFor(t, "retrying, cause postgres_unavailable", func() bool {
		return gauge("effectively_partition_state", "state", "retrying") == 1 &&
			gauge("effectively_partition_retry_cause", "cause", consumer.CausePostgresUnavailable) == 1
	})
	send(15)
	waitFor(t, "the lag covers what arrived during the fault", func() bool { return gauge("effectively_consumer_lag", "", "") == 40 })
	require.Zero(t, gauge("effectively_partition_state", "state", "running"))
	require.Zero(t, gauge("effectively_partition_retry_cause", "cause", consumer.CauseOther))
	st := c.Status()
	require.Len(t, st, 1)
	require.Equal(t, consumer.StateRetrying, st[0].State)
	require.Equal(t, consumer.CausePostgresUnavailable, st[0].Cause)
	require.Equal(t, int64(10), st[0].Position)
	require.Equal(t, int64(50), st[0].EndOffset)
	require.Equal(t, int64(40), st[0].Lag)
	require.Positive(t, st[0].Attempts)
	require.Equal(t, 10, a.total(), "nothing applied while failing")

	a.down.Store(false)
	waitFor(t, "caught up, running, no lag, no cause", func() bool {
		return a.total() == 50 && gauge("effectively_consumer_lag", "", "") == 0 &&
			gauge("effectively_partition_state", "state", "running") == 1 &&
			gauge("effectively_partition_retry_cause", "", "") == 0
	})
	require.Equal(t, consumer.StateRunning, c.Status()[0].State)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("consumer did not stop")
	}
}

// sumGauge sums a gauge family's series whose label has value (every
// series when label is empty).
func sumGauge(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == label && l.GetValue() == value)
			}
			if match {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
