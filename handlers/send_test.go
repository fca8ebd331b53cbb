package handlers

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/internal/outbox"
)

// A side effect's path made from an event's content that could reach
// beyond its target's URL is the event's fault: Send refuses it (the event
// is dead-lettered) instead of recording an intent that would call it.
func TestSendRefusesAPathThatLeavesItsTarget(t *testing.T) {
	t.Parallel()
	reg := &Registry{}
	reg.Target("partner", Idempotent)
	env := (*engineRegistry)(reg).Env(map[string]outbox.Endpoint{"partner": {URL: "https://partner.example.com/api/v1/contacts?api_key=K"}}, outbox.Expiry{}, nil, 0)
	send := func(path string) error {
		e := (*engineEffects)(newEffects(env))
		e.Begin(Origin{Topic: "t"}, event.Event{Key: "k", Subject: "s"})
		return e.Effects().Send(Request{Target: "partner", Operation: "partner.sync", Resource: "s", Method: http.MethodPut, Path: path})
	}
	require.NoError(t, send(url.PathEscape("a/b")))
	require.NoError(t, send("42?page=2"))
	for _, p := range []string{url.PathEscape("x") + "/../../admin/users/1", url.PathEscape("x/../../admin"), "%2e%2e", "..;/admin",
		"//evil.com/x", "https://evil.com/", "a\\..\\b", "42?api_key=mine"} {
		err := send(p)
		require.ErrorIs(t, err, ErrUnsafePath, p)
		require.True(t, event.IsPermanent(err), p)
	}
}
