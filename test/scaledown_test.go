package test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/examples/accounts/workload"
	"github.com/effectively-io/effectively/internal/kafkatest"
)

// staticRig is a rig with the default session timeout (45 s: what a static
// member's stop costs is the point) and static members.
func staticRig(t *testing.T, partitions int32) *rig {
	r := newRig(t, partitions)
	r.env = withoutEnv(r.env, "EFFECTIVELY_KAFKA_SESSION_TIMEOUT", "EFFECTIVELY_KAFKA_REBALANCE_TIMEOUT")
	return r
}

// A stopped static member stays in the group until its session expires, so
// a rewind is refused for that long. Nothing the broker shows tells a
// stopped static member from a running one, and an admin address that
// refuses proves nothing (the worker's admin server may listen elsewhere):
// --remove-stopped-members never removes a member on that ground, running
// or not, and names the flag that does; --remove-member refuses a member
// that answers as itself, and removes a stopped one at once.
func TestReplayRemovesStoppedStaticMembers(t *testing.T) {
	t.Parallel()
	r := staticRig(t, 2)
	admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r.env = append(r.env, "EFFECTIVELY_HTTP_ADDR="+admin)
	r.produceAccounts(t, accountIDs("a", 0, 20)...)
	w := r.startedWorker(t, "EFFECTIVELY_KAFKA_INSTANCE_ID=w0")
	r.waitApplied(t, 20, 2*time.Minute)
	memberID := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		groups, err := kafkatest.Admin(t).DescribeGroups(ctx, r.group)
		require.NoError(t, err)
		g := groups[r.group]
		require.NoError(t, g.Err)
		require.Len(t, g.Members, 1, "w0 is the group's one member")
		return g.Members[0].MemberID
	}
	running := memberID()

	code, _, stderr := r.replay(t, "--from-start", "--execute", "--remove-member", "w0")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "refusing to remove running member(s)")
	require.Contains(t, stderr, "w0 (its admin server http://"+admin+"/status answers as it)")
	require.Equal(t, int64(20), r.applied(t), "nothing rewound")

	// The bug this guards against: the replay's http.addr names another
	// port than the running worker's, where nothing listens. The refused
	// connection once counted as "stopped" and the running w0 was removed
	// (fenced, its partitions moved). Now it is not proven stopped: the
	// command refuses, removes nothing, and w0 keeps its membership.
	elsewhere := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	code, _, stderr = runCmd(t, append(append([]string{}, r.env...), "EFFECTIVELY_HTTP_ADDR="+elsewhere),
		"replay", "--topic", r.topic, "--from-start", "--execute", "--remove-stopped-members")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "not removing static member(s) of group "+r.group+" that are not proven stopped: w0 at 127.0.0.1 (http://"+elsewhere+"/status refused the connection); nothing was removed")
	require.Contains(t, stderr, "fix: check that they are stopped (e.g. kubectl get pod w0), then name them: --remove-member w0")
	require.Equal(t, running, memberID(), "the running member was not removed")
	require.Equal(t, int64(20), r.applied(t), "nothing rewound")
	require.NotContains(t, w.stderr.String(), "FENCED_INSTANCE_ID")
	require.False(t, w.exited())

	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	stopped := time.Now()
	// Without removal the stopped static member still holds the group
	// (kafka.session_timeout is 45 s); the refusal names the way out.
	code, _, stderr = r.replay(t, "--from-start", "--execute")
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "instance w0")
	require.Contains(t, stderr, "--remove-member ID")
	// Stopped, its address refuses at the right port too; that is still no
	// proof, and nothing is removed.
	code, _, stderr = r.replay(t, "--from-start", "--execute", "--remove-stopped-members")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "w0 at 127.0.0.1 (http://"+admin+"/status refused the connection)")
	require.Equal(t, running, memberID(), "still in the group")

	// The operator's statement is the proof.
	code, out, stderr := r.replay(t, "--from-start", "--execute", "--remove-stopped-members", "--remove-member", "w0")
	accepted := time.Since(stopped)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "removed stopped static member(s) from group "+r.group+": w0")
	require.Contains(t, out, "rewound")
	require.Equal(t, int64(0), r.applied(t), "rewound to the start")
	t.Logf("replay --execute --remove-member accepted %s after the static worker stopped (kafka.session_timeout 45 s)", accepted.Round(time.Millisecond))
	fmt.Printf("replay accepted %s after the last static worker stopped, with --remove-member\n", accepted.Round(time.Millisecond))
}

// What a static member's graceful stop costs, before and after
// kafka.leave_on_shutdown: the stall of the removed member's partitions on a
// scale-down (SIGTERM → the survivor advances them), and the wait before
// `replay` is accepted once the last worker has stopped. Times are printed,
// not asserted; correctness is (every partition resumes, the replay is
// accepted).
func TestStaticScaleDownAndReplayWait(t *testing.T) {
	if os.Getenv("EFFECTIVELY_BENCH_MEMBERSHIP") != "1" {
		t.Skip("measurement; runs in make bench (EFFECTIVELY_BENCH_MEMBERSHIP=1)")
	}
	var rows []string
	for _, leave := range []bool{false, true} {
		name := map[bool]string{false: "static (before)", true: "static + kafka.leave_on_shutdown"}[leave]
		t.Run(fmt.Sprint(leave), func(t *testing.T) {
			stall, wait := measureScaleDown(t, leave)
			rows = append(rows, fmt.Sprintf("%-34s  %-22s  %s", name, stall.Round(100*time.Millisecond), wait.Round(100*time.Millisecond)))
		})
	}
	table := fmt.Sprintf("%-34s  %-22s  %s\n%s", "scenario", "scale-down stall (max)", "replay accepted after", strings.Join(rows, "\n"))
	t.Logf("\n%s", table)
	fmt.Printf("\n2 static workers, 4 partitions, 200 records/s, kafka.session_timeout 45 s (default), classic protocol\n"+
		"(stall: SIGTERM of one worker → each of its partitions' stored position next advances; replay: last worker exited → dry run accepted)\n%s\n", table)
}

func measureScaleDown(t *testing.T, leave bool) (stall, wait time.Duration) {
	const partitions = 4
	r := staticRig(t, partitions)
	env := func(i int) []string {
		return append(slices.Clone(r.env), fmt.Sprintf("EFFECTIVELY_KAFKA_INSTANCE_ID=w%d", i), fmt.Sprintf("EFFECTIVELY_KAFKA_LEAVE_ON_SHUTDOWN=%t", leave))
	}
	stopProducing := producePaced(t, r.topic, workload.Config{Accounts: 500, Events: 200 * 600, Duplicates: 0.1, OutOfOrder: 0.1, Seed: 51}, 200)
	tr := trackPositions(t, r)
	workers := []*proc{start(t, env(0), "run"), start(t, env(1), "run")}
	waitUntil(t, "both members consuming", 2*time.Minute, func(context.Context) bool {
		return tr.allAdvancedWithin(partitions, time.Second) &&
			len(ownedPartitions(workers[0].stderr.String())) == partitions/2 && len(ownedPartitions(workers[1].stderr.String())) == partitions/2
	})
	victim := ownedPartitions(workers[1].stderr.String())
	sigAt := time.Now()
	workers[1].signal(t, syscall.SIGTERM)
	require.Equal(t, 0, workers[1].wait(t, time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	baseline, err := r.positions(ctx)
	cancel()
	require.NoError(t, err)
	tr.arm(sigAt, baseline)
	waitUntil(t, "the removed member's partitions advance again", 3*time.Minute, func(context.Context) bool {
		return tr.allResumed(partitions)
	})
	for p, d := range tr.stalls() {
		if slices.Contains(victim, p) {
			stall = max(stall, d)
		}
	}
	exp := stopProducing()
	r.waitApplied(t, exp.Records, 3*time.Minute)
	workers[0].signal(t, syscall.SIGTERM)
	require.Equal(t, 0, workers[0].wait(t, time.Minute))
	stopped := time.Now()
	waitUntil(t, "replay accepted", 3*time.Minute, func(context.Context) bool {
		code, _, _ := r.replay(t, "--from-start")
		return code == 0
	})
	wait = time.Since(stopped)
	r.verify(t, exp)
	return stall, wait
}

// With kafka.leave_on_shutdown a static member leaves the group by its
// instance ID when it stops: a rewind is accepted at once, not after the
// 45 s session timeout.
func TestLeaveOnShutdownRemovesStaticMember(t *testing.T) {
	t.Parallel()
	r := staticRig(t, 2)
	r.produceAccounts(t, accountIDs("a", 0, 10)...)
	w := r.startedWorker(t, "EFFECTIVELY_KAFKA_INSTANCE_ID=w0", "EFFECTIVELY_KAFKA_LEAVE_ON_SHUTDOWN=true")
	r.waitApplied(t, 10, 2*time.Minute)
	w.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, w.wait(t, time.Minute))
	require.Contains(t, w.stderr.String(), "left the group by instance ID")
	code, out, stderr := r.replay(t, "--from-start")
	require.Equal(t, 0, code, "the group has no member left: %s", stderr)
	require.Contains(t, out, "dry run")
}
