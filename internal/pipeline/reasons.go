package pipeline

import (
	"embed"

	"github.com/effectively-io/effectively/event"
)

// ReasonUnconfiguredTopic: the record came from a topic the worker has no
// decoder for (a wiring bug: every topic in kafka.topics gets one).
const ReasonUnconfiguredTopic event.Reason = "unconfigured_topic"

// ReasonUnencodable: the event passed its decoder but a value in it could
// not be encoded again for its parked row (a bug of the decoder's that let
// it through; dead-lettered rather than retried, since every retry would
// fail the same way).
const ReasonUnencodable event.Reason = "unencodable"

//go:embed applier.go sweeper.go reasons.go sqlstate.go
var reasonSources embed.FS

// Reasons returns the dead-letter reasons the batch transaction and the
// parking sweeper give, with their doc comments.
func Reasons() []event.ReasonDoc {
	return event.DeclaredReasons(reasonSources)
}
