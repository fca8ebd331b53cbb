package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Member is an active member of a consumer group.
type Member struct {
	MemberID   string `json:"member_id"`
	ClientID   string `json:"client_id"`
	Host       string `json:"host"`
	InstanceID string `json:"instance_id,omitempty"`
	// Partitions are the member's assigned partitions, by topic.
	Partitions map[string][]int32 `json:"partitions,omitempty"`
}

func (m Member) String() string {
	s := fmt.Sprintf("member %s (client %s, host %s", m.MemberID, m.ClientID, m.Host)
	if m.InstanceID != "" {
		s += ", instance " + m.InstanceID
	}
	return s + ")"
}

// ActiveMembers returns the group's members, whichever protocol it uses:
// classic (DescribeGroups) or KIP-848 (ConsumerGroupDescribe). A group that
// does not exist has none.
func ActiveMembers(ctx context.Context, adm *kadm.Client, group string) ([]Member, error) {
	var out []Member
	classic, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("describing group %s: %w", group, err)
	}
	if g, ok := classic[group]; ok {
		switch {
		case g.Err == nil:
			for _, m := range g.Members {
				mem := Member{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, InstanceID: deref(m.InstanceID)}
				if a, ok := m.Assigned.AsConsumer(); ok {
					for _, t := range a.Topics {
						mem.assign(t.Topic, t.Partitions...)
					}
				}
				out = append(out, mem)
			}
		case !notFound(g.Err):
			return nil, fmt.Errorf("describing group %s: %w", group, g.Err)
		}
	}
	next, err := adm.DescribeConsumerGroups(ctx, group)
	if err != nil && !errors.Is(err, kerr.UnsupportedVersion) {
		return nil, fmt.Errorf("describing consumer group %s: %w", group, err)
	}
	if g, ok := next[group]; ok {
		switch {
		case g.Err == nil:
			for _, m := range g.Members {
				mem := Member{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, InstanceID: deref(m.InstanceID)}
				m.Assignment.Each(func(t string, p int32) { mem.assign(t, p) })
				out = append(out, mem)
			}
		case !notFound(g.Err):
			return nil, fmt.Errorf("describing consumer group %s: %w", group, g.Err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].MemberID < out[j].MemberID })
	return out, nil
}

func (m *Member) assign(topic string, ps ...int32) {
	if len(ps) == 0 {
		return
	}
	if m.Partitions == nil {
		m.Partitions = map[string][]int32{}
	}
	m.Partitions[topic] = append(m.Partitions[topic], ps...)
	slices.Sort(m.Partitions[topic])
}

// notFound: the group does not exist, or not under that protocol.
func notFound(err error) bool {
	return errors.Is(err, kerr.GroupIDNotFound)
}

// ActiveMembersError refuses a change while the group has members.
type ActiveMembersError struct {
	Group   string
	Members []Member
}

func (e *ActiveMembersError) Error() string {
	names := make([]string, len(e.Members))
	for i, m := range e.Members {
		names[i] = m.String()
	}
	msg := fmt.Sprintf("group %s has %d active member(s): %s; stop the workers of this group first (a running member would keep and commit its own positions), then run this again",
		e.Group, len(e.Members), strings.Join(names, "; "))
	for _, m := range e.Members {
		if m.InstanceID != "" {
			return msg + " (a stopped static member, one with an instance id, stays in the group until kafka.session_timeout expires; " +
				"to go on now, add --remove-member ID to `replay --execute` for each one you know is stopped (--remove-stopped-members checks every static member and names the flags to add); " +
				"kafka.leave_on_shutdown: true makes workers leave when they stop)"
		}
	}
	return msg
}

// RequireNoMembers returns an *ActiveMembersError when the group has
// members.
func RequireNoMembers(ctx context.Context, adm *kadm.Client, group string) error {
	ms, err := ActiveMembers(ctx, adm, group)
	if err != nil {
		return err
	}
	if len(ms) > 0 {
		return &ActiveMembersError{Group: group, Members: ms}
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// RemoveStatic removes static members from group by their instance IDs
// (KIP-345 LeaveGroup), as a stopped member's own leave would: the group
// forgets them now instead of when their session expires. Only members
// whose process is known to be gone may be removed: a running one is
// fenced, loses its partitions mid-batch and rejoins.
func RemoveStatic(ctx context.Context, adm *kadm.Client, group string, instanceIDs ...string) error {
	if len(instanceIDs) == 0 {
		return nil
	}
	resps, err := adm.LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(instanceIDs...).
		Reason("effectively replay: removing stopped static members"))
	if err != nil {
		return fmt.Errorf("removing members %s from group %s: %w", strings.Join(instanceIDs, ", "), group, err)
	}
	if err := resps.Error(); err != nil {
		return fmt.Errorf("removing members %s from group %s: %w", strings.Join(instanceIDs, ", "), group, err)
	}
	return nil
}
