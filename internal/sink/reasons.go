package sink

import (
	"embed"

	"github.com/effectively-io/effectively/event"
)

//go:embed sink.go
var reasonSources embed.FS

// Reasons returns the dead-letter reasons of config-only sinks, with their
// doc comments, for the generated reference.
func Reasons() []event.ReasonDoc {
	return event.DeclaredReasons(reasonSources)
}
