package pipeline

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectively-io/effectively/event"
)

// The dead-letter reasons of an event whose own statements PostgreSQL
// refused. Each names the SQLSTATE class, by PostgreSQL's name for it
// (Appendix A of its manual); the dead letter's error carries the full
// code and message.
const (
	// ReasonCardinalityViolation: SQLSTATE class 21.
	ReasonCardinalityViolation event.Reason = "cardinality_violation"
	// ReasonDataException: SQLSTATE class 22.
	ReasonDataException event.Reason = "data_exception"
	// ReasonIntegrityConstraintViolation: SQLSTATE class 23.
	ReasonIntegrityConstraintViolation event.Reason = "integrity_constraint_violation"
	// ReasonWithCheckOptionViolation: SQLSTATE class 44.
	ReasonWithCheckOptionViolation event.Reason = "with_check_option_violation"
	// ReasonProgramLimitExceeded: SQLSTATE class 54.
	ReasonProgramLimitExceeded event.Reason = "program_limit_exceeded"
)

// eventFaultClasses are the SQLSTATE classes that are one event's fault:
// the statement failed because of the values this event put in it, so the
// same statement fails on every retry, and the same statements of its
// batch-mates do not. On such a failure the batch is redone with each
// event's statements in a savepoint; the event whose savepoint fails is
// dead-lettered with the class's reason, and its batch-mates commit.
//
// Every other class is retried with backoff, the partition paused, and
// never dead-lettered: it is the database's state, the deployment or a bug
// in a statement, which an operator fixes and after which the same event
// applies. Dead-lettering those would turn an outage or a bad deploy into
// thousands of dead letters.
//
//	class  name                                   decision  why
//	08     connection_exception                   retry     the connection, not the data
//	0A     feature_not_supported                  retry     the statement as written
//	21     cardinality_violation                  isolate   ON CONFLICT touching a row twice, a
//	                                                        subquery returning two rows: the rows
//	                                                        this event's values select (a batch-
//	                                                        wide statement may trip it where each
//	                                                        event alone does not: isolation sorts
//	                                                        that out)
//	22     data_exception                         isolate   a value out of range, too long for its
//	                                                        column, untranslatable (\u0000 in jsonb)
//	23     integrity_constraint_violation         isolate   check, not-null, foreign key, unique:
//	                                                        the event's values break a constraint
//	25     invalid_transaction_state              retry     25006 read-only after a failover
//	28     invalid_authorization_specification    retry     credentials
//	3D/3F  invalid catalog / schema name          retry     configuration
//	40     transaction_rollback                   retry     serialization failure, deadlock
//	42     syntax_error_or_access_rule_violation  retry     a statement or a missing GRANT: the
//	                                                        deployment's fault, never the event's
//	                                                        (parameters are typed by the
//	                                                        statement, so data cannot cause 42)
//	44     with_check_option_violation            isolate   the row the event writes falls outside
//	                                                        an updatable view's WHERE
//	53     insufficient_resources                 retry     disk full, out of memory, connections
//	54     program_limit_exceeded                 isolate   54000 index row too large for a btree,
//	                                                        54001 stack depth (deep jsonb), too
//	                                                        many columns or arguments: the event's
//	                                                        size, which retrying never shrinks
//	55     object_not_in_prerequisite_state       retry     55P03 lock_timeout, an object in use
//	57     operator_intervention                  retry     57014 statement_timeout, shutdown
//	58     system_error                           retry     I/O errors
//	P0     plpgsql_error                          retry     RAISE in a trigger or function: unknown
//	                                                        intent (a trigger that refuses data
//	                                                        should raise with a class 22 or 23 code,
//	                                                        e.g. ERRCODE = 'check_violation')
//	XX     internal_error                         retry     data corruption, a server bug
//	other  (every class not listed)               retry     unknown: never dead-letter the unknown
//
// Errors that are not PostgreSQL errors (a lost connection, a timeout, a
// cancelled context) are retried too.
var eventFaultClasses = map[string]event.Reason{
	"21": ReasonCardinalityViolation,
	"22": ReasonDataException,
	"23": ReasonIntegrityConstraintViolation,
	"44": ReasonWithCheckOptionViolation,
	"54": ReasonProgramLimitExceeded,
}

// EventFaultReasons returns the reasons an event's statement failure can be
// dead-lettered with (for metrics that pre-register their labels, and for
// docs).
func EventFaultReasons() []event.Reason {
	return []event.Reason{
		ReasonCardinalityViolation, ReasonDataException, ReasonIntegrityConstraintViolation,
		ReasonWithCheckOptionViolation, ReasonProgramLimitExceeded,
	}
}

// eventsFault is the one rule that decides retry versus dead letter (the
// "event's fault" of the design): an error that follows from one event's
// content — a permanent error from the decoder, a validation, a handler, a
// sink's conversion or the encoding of its parked row, or a statement that
// PostgreSQL refused for the event's values (eventFaultClasses) — isolates
// that event: it is dead-lettered with the reason returned and its
// batch-mates commit. Every other error is the environment's (a
// connection, a timeout, a lock, a source or target down) and retries the
// batch. Every place in the batch that meets an error asks here.
func eventsFault(err error) (event.Reason, bool) {
	if err == nil {
		return "", false
	}
	if event.IsPermanent(err) {
		r := event.ReasonOf(err)
		if r == "" {
			r = event.ReasonHandlerError
		}
		return r, true
	}
	return eventFault(err)
}

// eventFault reports whether err is a statement failure that is one event's
// fault (see eventFaultClasses), and the reason to dead-letter it with.
func eventFault(err error) (event.Reason, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return "", false
	}
	r, ok := eventFaultClasses[pgErr.Code[:2]]
	return r, ok
}
