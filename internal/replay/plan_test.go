package replay

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseOffsets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want map[int32]int64
		err  string
	}{
		{in: "0:12", want: map[int32]int64{0: 12}},
		{in: " 0:12, 3:0 ,", want: map[int32]int64{0: 12, 3: 0}},
		{in: "", err: "no partition:offset pairs"},
		{in: "0", err: "want partition:offset"},
		{in: "a:1", err: "want partition:offset"},
		{in: "0:-1", err: "want partition:offset"},
		{in: "-1:5", err: "want partition:offset"},
		{in: "1:5,1:6", err: "listed twice"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseOffsets(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestPlanTargetsSkipsAhead(t *testing.T) {
	t.Parallel()
	p := Plan{Partitions: []PartitionPlan{
		{Partition: 0, TargetOffset: 5, Action: ActionRewind},
		{Partition: 1, TargetOffset: 9, Action: ActionAhead},
		{Partition: 2, TargetOffset: 3, Action: ActionUnchanged},
	}}
	require.Equal(t, "0:5,2:3", p.Targets())
	require.Len(t, p.WithAction(ActionRewind), 1)
	require.Len(t, p.WithAction(ActionAhead), 1)
}

func TestKafkaCommitErrorSaysPostgresHoldsThePosition(t *testing.T) {
	t.Parallel()
	err := &KafkaCommitError{Group: "g", Topic: "t", Targets: "0:5,1:7",
		Failed: map[int32]error{1: errors.New("UNKNOWN_MEMBER_ID"), 0: errors.New("REBALANCE_IN_PROGRESS")}}
	msg := err.Error()
	require.Contains(t, msg, "PostgreSQL (authoritative) already holds the new positions of group g on t")
	require.Contains(t, msg, "partition 0: REBALANCE_IN_PROGRESS; partition 1: UNKNOWN_MEMBER_ID")
	require.Contains(t, msg, "effectively replay --group g --topic t --to-offsets 0:5,1:7 --execute")
}

func TestActiveMembersErrorNamesMembers(t *testing.T) {
	t.Parallel()
	err := &ActiveMembersError{Group: "g", Members: []Member{
		{MemberID: "m-1", ClientID: "effectively", Host: "/10.0.0.1"},
		{MemberID: "m-2", ClientID: "effectively", Host: "/10.0.0.2", InstanceID: "pod-2"},
	}}
	msg := err.Error()
	require.Contains(t, msg, "group g has 2 active member(s): member m-1 (client effectively, host /10.0.0.1); member m-2 (client effectively, host /10.0.0.2, instance pod-2)")
	require.Contains(t, msg, "stop the workers")
	require.Contains(t, msg, "kafka.session_timeout")
}
