package consumer

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/effectively-io/effectively/internal/deadline"
)

// A partition's state, as effectively_partition_state and `effectively
// status` report it.
const (
	// StateRunning: the partition applies what it fetches.
	StateRunning = "running"
	// StatePaused: fetching is paused for backpressure (the partition's
	// queue is full); it resumes once the queue drains.
	StatePaused = "paused"
	// StateRetrying: a batch failed transiently and is retried with backoff
	// while fetching is paused (see the retry cause).
	StateRetrying = "retrying"
	// StateStopped: the partition's position is outside its log; it applies
	// nothing until an operator decides (see [Options.OffsetOutOfRange]).
	StateStopped = "stopped"
)

// States are the partition states, in the order metrics list them.
var States = []string{StateRunning, StatePaused, StateRetrying, StateStopped}

// Retry causes: a short, bounded classification of why a partition retries,
// for effectively_partition_retry_cause and `effectively status`.
const (
	// CausePostgresUnavailable: PostgreSQL refused or lost the connection,
	// is shutting down, or is out of connections.
	CausePostgresUnavailable = "postgres_unavailable"
	// CausePostgresTimeout: a statement or the connection timed out
	// (statement_timeout, lock_timeout, a dial or read deadline).
	CausePostgresTimeout = "postgres_timeout"
	// CauseSourceUnavailable: a fetch-on-event handler's source did not
	// answer (see [RetryCause]).
	CauseSourceUnavailable = "source_unavailable"
	// CauseSchemaRegistryUnavailable: the schema registry did not answer a
	// schema a record needs (a registry format's topic).
	CauseSchemaRegistryUnavailable = "schema_registry_unavailable"
	// CauseKafka: a Kafka error.
	CauseKafka = "kafka"
	// CauseOther: anything else (a serialization failure, a missing GRANT,
	// a handler's transient error).
	CauseOther = "other"
)

// Causes are the retry causes, in the order metrics list them.
var Causes = []string{CausePostgresUnavailable, CausePostgresTimeout, CauseSourceUnavailable, CauseSchemaRegistryUnavailable, CauseKafka, CauseOther}

// causeError carries a retry cause chosen where the error arose.
type causeError struct {
	cause string
	err   error
}

func (e causeError) Error() string      { return e.err.Error() }
func (e causeError) Unwrap() error      { return e.err }
func (e causeError) RetryCause() string { return e.cause }

// WithRetryCause marks err with one of the [Causes], for an [Applier] whose
// failure is not PostgreSQL's (a prefetch source that did not answer is
// [CauseSourceUnavailable]). Nil stays nil.
func WithRetryCause(cause string, err error) error {
	if err == nil {
		return nil
	}
	return causeError{cause: cause, err: err}
}

// RetryCause classifies a failed batch's error into one of the [Causes]. An
// error marked with [WithRetryCause] keeps its mark; PostgreSQL's errors are
// classified by SQLSTATE (class 08, 53300 and 57P01–57P03 are the server
// being unavailable, 57014 and 55P03 a timeout); network errors without a
// SQLSTATE are PostgreSQL's (the applier talks to nothing else), unless
// marked.
func RetryCause(err error) string {
	var marked interface{ RetryCause() string }
	if errors.As(err, &marked) {
		return marked.RetryCause()
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "08",
			pgErr.Code == "53300", pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03":
			return CausePostgresUnavailable
		case pgErr.Code == "57014", pgErr.Code == "55P03":
			return CausePostgresTimeout
		}
		return CauseOther
	}
	var kErr *kerr.Error
	if errors.As(err, &kErr) {
		return CauseKafka
	}
	// A connection that got no answer within postgres.answer_timeout: a
	// cut or half-open link, not a slow statement.
	var silent *deadline.TimeoutError
	if errors.As(err, &silent) {
		return CausePostgresUnavailable
	}
	if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		return CausePostgresTimeout
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), pgconn.SafeToRetry(err):
		return CausePostgresUnavailable
	}
	return CauseOther
}

// PartitionStatus is what a member knows of one of its partitions.
type PartitionStatus struct {
	// Topic and Partition name the partition.
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// State is one of [States].
	State string `json:"state"`
	// Cause is the retry cause while State is retrying (one of [Causes]).
	Cause string `json:"cause,omitempty"`
	// Error is the last failed attempt's error while retrying, or why the
	// partition is stopped.
	Error string `json:"error,omitempty"`
	// Since is when the partition entered State.
	Since time.Time `json:"since"`
	// Attempts counts the failed attempts of the batch being retried.
	Attempts int `json:"attempts,omitempty"`
	// Position is the offset after the last record this member applied
	// (or the position it resumed from); -1 when not yet known.
	Position int64 `json:"position"`
	// EndOffset is the partition's last stable offset at the last lag
	// refresh (-1: not yet read).
	EndOffset int64 `json:"end_offset"`
	// Lag is EndOffset − Position, as effectively_consumer_lag reports it
	// (-1: not yet known).
	Lag int64 `json:"lag"`
}
