package accounts

import (
	"embed"

	"github.com/effectively-io/effectively/event"
)

//go:embed account.go ledger.go doorbell.go
var reasonSources embed.FS

// Reasons returns the reference domain's own dead-letter reasons, with
// their doc comments, for the generated reference.
func Reasons() []event.ReasonDoc {
	return event.DeclaredReasons(reasonSources)
}
