//go:build crashpoint

package crashpoint

import (
	"strings"
	"testing"
)

// go test -tags crashpoint ./crashpoint (make vet runs it): the armed point,
// its count, and the names a typo is checked against.
func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		env, armed string
		count      int64
		err        string
	}{
		{env: "", armed: ""},
		{env: AfterDBCommit, armed: AfterDBCommit, count: 1},
		{env: OutboxAfterCall + ":3", armed: OutboxAfterCall, count: 3},
		{env: "nonsense", err: "unknown crash point \"nonsense\"; known points: " + strings.Join(points, ", ")},
		{env: AfterDBCommit + ":0", err: "want point:n with n ≥ 1"},
	} {
		t.Setenv(EnvVar, tc.env)
		armed, loadErr = "", nil
		countdown.Store(0)
		load()
		if tc.err != "" {
			if loadErr == nil || !strings.Contains(loadErr.Error(), tc.err) {
				t.Errorf("%s=%q: error %v, want one containing %q", EnvVar, tc.env, loadErr, tc.err)
			}
			continue
		}
		if loadErr != nil || armed != tc.armed || countdown.Load() != tc.count {
			t.Errorf("%s=%q: armed %q count %d err %v, want %q %d", EnvVar, tc.env, armed, countdown.Load(), loadErr, tc.armed, tc.count)
		}
	}
}
