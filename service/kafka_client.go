package service

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/broker"
)

// newKafkaClient makes a client from the seed brokers, TLS and SASL of cfg
// (see [broker.ClientOpts]) followed by extra: every Kafka client this
// binary makes goes through it or passes the same options to a package.
func newKafkaClient(cfg config.Config, log *zap.Logger, extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := broker.ClientOpts(cfg.Kafka, log)
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(append(opts, extra...)...)
}

// relayTransactionalID is the dead-letter relay's transactional ID; the
// documented ACLs grant WRITE and DESCRIBE on it.
func relayTransactionalID(cfg config.Config) string {
	return "effectively-dlq-relay." + cfg.Kafka.Group
}

// workerAccess is what the worker of cfg needs from the cluster (checked at
// start-up by [broker.CheckAccess]).
func workerAccess(cfg config.Config) broker.Access {
	a := broker.Access{Topics: cfg.Kafka.Topics, Group: cfg.Kafka.Group, TransactionalID: relayTransactionalID(cfg)}
	for _, t := range cfg.Kafka.Topics {
		a.DLQTopics = append(a.DLQTopics, cfg.TopicSettings(t).DLQ)
	}
	return a
}

// checkAccess reports the first ACL the worker lacks, bounded by
// startupTimeout.
func checkAccess(ctx context.Context, cl *kgo.Client, cfg config.Config) error {
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	return broker.CheckAccess(ctx, cl, cfg.Kafka, workerAccess(cfg))
}
