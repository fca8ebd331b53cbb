package handlers

import "embed"

// reasonSources are the files declaring the handler API's dead-letter
// reasons (Reason… constants with their doc comments), which the reference
// docs list.
//
//go:embed effects.go send.go
var reasonSources embed.FS
