package handlers

import (
	"embed"

	"github.com/effectively-io/effectively/event"
)

//go:embed effects.go send.go
var reasonSources embed.FS

// Reasons returns the dead-letter reasons the handler API declares (beyond
// the decoder's, event.ReasonDocs), with their doc comments.
func Reasons() []event.ReasonDoc {
	return event.DeclaredReasons(reasonSources)
}
