// Package crashpoint kills the process at named points of the pipeline, for
// the fault suites that prove a crash anywhere loses and doubles nothing.
//
// The hook exists only in a binary built with the crashpoint build tag
// (go build -tags crashpoint), which the fault suites build; a release build
// (make build) gets an empty, inlined [Hit] and a [Check] that reads nothing,
// so no environment variable can make a production worker kill itself.
//
// In a crashpoint build, EFFECTIVELY_CRASH_AT names a point: the variable
// holds "point:n" and the process SIGKILLs itself the n-th time it reaches
// that point (n defaults to 1). SIGKILL, not an exit: nothing gets to clean
// up, exactly as when the kernel's OOM killer or a node failure strikes. An
// unknown point or a bad n is an error that [Check] reports, so a typo fails
// the process at start instead of silently crashing nowhere.
package crashpoint

// The named crash points.
const (
	// BeforeDBCommit: the batch's statements ran, COMMIT was not sent.
	BeforeDBCommit = "before_db_commit"
	// AfterDBCommit: the batch committed to PostgreSQL; Kafka's commit has
	// not happened.
	AfterDBCommit = "after_db_commit"
	// AfterKafkaCommit: both commits happened.
	AfterKafkaCommit = "after_kafka_commit"
	// OutboxBeforeCall: the dispatcher committed an intent as sending and
	// has not made its call.
	OutboxBeforeCall = "outbox_before_call"
	// OutboxAfterCall: the call was answered; its outcome is not recorded.
	OutboxAfterCall = "outbox_after_call"
)

// EnvVar names the point to crash at (read only by a crashpoint build).
const EnvVar = "EFFECTIVELY_CRASH_AT"
