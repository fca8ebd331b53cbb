package service

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/internal/replay"
	"github.com/effectively-io/effectively/internal/status"
)

// The admin probe proves a member runs when a worker at its address
// answers as that member; nothing it sees proves a member stopped.
func TestProbeMember(t *testing.T) {
	t.Parallel()
	answering := func(body any, code int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			require.Equal(t, "/status", r.URL.Path)
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(body)
		}))
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := l.Addr().String()
	require.NoError(t, l.Close())

	w0 := replay.Member{InstanceID: "w0", Host: "/127.0.0.1"}
	tests := []struct {
		name         string
		member       replay.Member
		admin        string
		running      bool
		unidentified bool
		seen         string
	}{
		{"answers as itself", w0, answering(status.Worker{Group: "g", InstanceID: "w0"}, http.StatusOK), true, false, "/status answers as it"},
		{"another instance of the group", w0, answering(status.Worker{Group: "g", InstanceID: "w1"}, http.StatusOK), false, false, `answers as another worker (group g, instance "w1")`},
		{"the same instance ID in another group", w0, answering(status.Worker{Group: "other", InstanceID: "w0"}, http.StatusOK), false, false, "answers as another worker (group other"},
		{"not a worker (an older build?)", w0, answering("hello", http.StatusNotFound), false, true, "answered 404 Not Found, not as a worker"},
		{"not JSON of a worker", w0, answering([]int{1}, http.StatusOK), false, true, "not as a worker"},
		{"refused", w0, refused, false, false, "refused the connection"},
		{"no port in http.addr", w0, "", false, false, "http.addr names no port"},
		{"no host from the broker", replay.Member{InstanceID: "w0"}, refused, false, false, "no host"},
	}
	for _, tt := range tests {
		// The member's host is the broker's view; the port is http.addr's.
		p := probeMember(context.Background(), "g", tt.member, tt.admin)
		require.Equal(t, tt.running, p.running, tt.name)
		require.Equal(t, tt.unidentified, p.unidentified, tt.name)
		require.Contains(t, p.seen, tt.seen, tt.name)
	}
}
