package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/effectively-io/effectively/config"
)

// Access is what a worker needs from the cluster: the ACLs docs/security.md
// lists, by resource. In Kafka, READ and WRITE each imply DESCRIBE.
type Access struct {
	// Topics are consumed: READ.
	Topics []string
	// DLQTopics receive dead letters through the relay, which also reads
	// them back after a failover: WRITE and READ (and CREATE when the relay
	// has to create a missing one, which is not checked here).
	DLQTopics []string
	// Group is the consumer group: READ.
	Group string
	// TransactionalID is the relay's: WRITE. A coordinator lookup checks
	// the DESCRIBE that WRITE implies; asking for WRITE itself would fence
	// the running relay.
	TransactionalID string
}

// CheckAccess asks the brokers whether the client's principal holds every
// ACL a needs, and returns a *[Denied] naming the first one missing. It
// uses the authorized operations Kafka reports (KIP-430) for topics and the
// group, and a coordinator lookup for the transactional ID; a broker that
// reports no authorized operations (no authorizer) passes. Topics that do
// not exist are left to the caller to report. Retriable errors (a
// coordinator still loading on a fresh cluster) are retried until ctx ends.
func CheckAccess(ctx context.Context, cl *kgo.Client, k config.Kafka, a Access) error {
	for {
		err := checkAccess(ctx, cl, k, a)
		if err == nil || !kerr.IsRetriable(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func checkAccess(ctx context.Context, cl *kgo.Client, k config.Kafka, a Access) error {
	principal := Principal(k)
	need := map[string][]kmsg.ACLOperation{}
	for _, t := range a.Topics {
		need[t] = append(need[t], kmsg.ACLOperationRead)
	}
	for _, t := range a.DLQTopics {
		need[t] = append(need[t], kmsg.ACLOperationWrite, kmsg.ACLOperationRead)
	}
	names := make([]string, 0, len(need))
	for t := range need {
		names = append(names, t)
	}
	slices.Sort(names)
	if len(names) > 0 {
		req := kmsg.NewPtrMetadataRequest()
		req.IncludeTopicAuthorizedOperations = true
		for _, t := range names {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(t)
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return fmt.Errorf("asking Kafka for the principal's topic permissions: %w", Explain(err, k))
		}
		for _, rt := range resp.Topics {
			name := ""
			if rt.Topic != nil {
				name = *rt.Topic
			}
			switch err := kerr.ErrorForCode(rt.ErrorCode); {
			case errors.Is(err, kerr.TopicAuthorizationFailed):
				// Not even DESCRIBE, which READ and WRITE imply: name the
				// first ACL the docs list for the topic.
				return &Denied{Principal: principal, Operation: need[name][0].String(), ResourceType: "topic", Resource: name, Err: err}
			case err != nil:
				continue // missing (UNKNOWN_TOPIC_OR_PARTITION): the caller reports it
			}
			if rt.AuthorizedOperations == -2147483648 {
				continue // not reported
			}
			have := kadm.DecodeACLOperations(rt.AuthorizedOperations)
			for _, op := range need[name] {
				if !slices.Contains(have, op) {
					return &Denied{Principal: principal, Operation: op.String(), ResourceType: "topic", Resource: name,
						Err: fmt.Errorf("the broker reports %s may %s on topic %s", principal, opsString(have), name)}
				}
			}
		}
	}

	adm := kadm.NewClient(cl)
	if a.Group != "" {
		groups, err := adm.DescribeGroups(ctx, a.Group)
		var g kadm.DescribedGroup
		if err == nil {
			g, err = groups[a.Group], groups[a.Group].Err
		}
		switch {
		case errors.Is(err, kerr.GroupAuthorizationFailed):
			return &Denied{Principal: principal, Operation: "READ", ResourceType: "group", Resource: a.Group, Err: err}
		case err != nil && !errors.Is(err, kerr.GroupIDNotFound):
			return fmt.Errorf("asking Kafka for the principal's permissions on group %s: %w", a.Group, Explain(err, k))
		case len(g.AuthorizedOperations) > 0 && !slices.Contains(g.AuthorizedOperations, kmsg.ACLOperationRead):
			return &Denied{Principal: principal, Operation: "READ", ResourceType: "group", Resource: a.Group,
				Err: fmt.Errorf("the broker reports %s may %s on group %s", principal, opsString(g.AuthorizedOperations), a.Group)}
		}
	}

	if a.TransactionalID != "" {
		r := adm.FindTxnCoordinators(ctx, a.TransactionalID)[a.TransactionalID]
		switch {
		case errors.Is(r.Err, kerr.TransactionalIDAuthorizationFailed):
			return &Denied{Principal: principal, Operation: "WRITE", ResourceType: "transactional-id", Resource: a.TransactionalID, Err: r.Err}
		case r.Err != nil:
			return fmt.Errorf("asking Kafka for the coordinator of transactional ID %s: %w", a.TransactionalID, Explain(r.Err, k))
		}
	}
	return nil
}

func opsString(ops []kmsg.ACLOperation) string {
	if len(ops) == 0 {
		return "nothing"
	}
	s := make([]string, len(ops))
	for i, o := range ops {
		s[i] = o.String()
	}
	return fmt.Sprint(s)
}
