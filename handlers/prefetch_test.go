package handlers

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/event"
)

var errDown = errors.New("503")

func TestPrefetchFailuresCountOnlyWhileOthersAreAnswered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := NewPrefetchFailures(2)
	bad := event.Event{Type: "thing.changed", Key: "bad"}
	good := event.Event{Type: "thing.changed", Key: "good"}
	other := event.Event{Type: "other.changed", Key: "other"}

	// An outage: nothing answers, nothing counts.
	for range 5 {
		require.ErrorIs(t, p.observe(ctx, bad, errDown), errDown)
		require.False(t, event.IsPermanent(p.observe(ctx, bad, errDown)))
	}
	// Another prefetcher's answers say nothing about this one's source.
	require.NoError(t, p.observe(ctx, other, nil))
	require.False(t, event.IsPermanent(p.observe(ctx, bad, errDown)))
	// A cancelled read is not the source's doing.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, p.observe(ctx, good, nil))
	require.False(t, event.IsPermanent(p.observe(cancelled, bad, context.Canceled)))
	require.False(t, event.IsPermanent(p.observe(ctx, bad, errDown)), "counted: 1")
	require.NoError(t, p.observe(ctx, good, nil))
	err := p.observe(ctx, bad, errDown)
	require.True(t, event.IsPermanent(err), "counted: 2")
	require.Equal(t, ReasonSourceUnavailable, event.ReasonOf(err))
	require.ErrorIs(t, err, errDown)

	// Forgotten once dead-lettered: a redrive starts again.
	require.NoError(t, p.observe(ctx, good, nil))
	require.False(t, event.IsPermanent(p.observe(ctx, bad, errDown)))
}

func TestPrefetchFailuresNilIsUnbounded(t *testing.T) {
	t.Parallel()
	var p *PrefetchFailures
	require.Equal(t, errDown, p.observe(context.Background(), event.Event{}, errDown))
}

func TestPrefetchClientCapsAndDoesNotRedirect(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/exact", http.StatusMovedPermanently)
		case "/exact":
			_, _ = io.WriteString(w, strings.Repeat("x", MaxPrefetchResponseBytes))
		default:
			_, _ = io.WriteString(w, strings.Repeat("x", MaxPrefetchResponseBytes+1))
		}
	}))
	t.Cleanup(srv.Close)
	c := NewPrefetchClient(0)

	resp, err := c.Get(srv.URL + "/moved")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMovedPermanently, resp.StatusCode)

	resp, err = c.Get(srv.URL + "/exact")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err, "a body of exactly the cap is fine")
	require.Len(t, b, MaxPrefetchResponseBytes)

	resp, err = c.Get(srv.URL + "/big")
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.ErrorIs(t, err, ErrResponseTooLarge)
}
