package handlers

import (
	"context"
	"net/http"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/internal/handlerbridge"
)

// The engine's side of this package: what the worker calls on a registry
// (resolving handlers, prerequisites and tables) and on a batch's effects
// (beginning an event, flushing the batch). It is reached through
// internal/handlerbridge, so it is not part of the API a handler sees.
type (
	engineEffects  Effects
	engineRegistry Registry
)

func init() {
	handlerbridge.NewEffects = func(env any) any { return (*engineEffects)(newEffects(env.(Env))) }
	handlerbridge.EffectsOf = func(e any) any { return (*engineEffects)(e.(*Effects)) }
	handlerbridge.Registry = func(r any) any { return (*engineRegistry)(r.(*Registry)) }
	handlerbridge.WrapTransport = func(env any, f func(http.RoundTripper) http.RoundTripper) any {
		return env.(Env).wrapTransport(f)
	}
	handlerbridge.Reasons = func() []event.ReasonDoc { return event.DeclaredReasons(reasonSources) }
	handlerbridge.TableColumns = func(ctx context.Context, q handlerbridge.Querier, table string) (map[string]handlerbridge.Column, error) {
		cols, _, _, err := tableColumns(ctx, q, table)
		return cols, err
	}
}

// Effects is the handler's view of the batch.
func (v *engineEffects) Effects() *Effects { return (*Effects)(v) }
