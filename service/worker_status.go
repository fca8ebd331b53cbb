package service

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively-io/effectively/config"
	"github.com/effectively-io/effectively/internal/consumer"
	"github.com/effectively-io/effectively/internal/httpserver"
	"github.com/effectively-io/effectively/internal/status"
)

func (a *App) workerStatus(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, cons *consumer.Consumer) status.Worker {
	st := status.Worker{
		Build: a.name(), Version: buildVersion(a.Version),
		Group: cfg.Kafka.Group, InstanceID: cfg.Kafka.InstanceID, ClientID: cfg.Kafka.ClientID,
		Joined: cons.Joined(), Closing: cons.Closing(), Postgres: "ok",
		Partitions: cons.Status(), At: time.Now().UTC(),
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		st.Postgres = fmt.Sprintf("unreachable at %s: %v", pgAddr(cfg.Postgres.URL), err)
	}
	st.Redact()
	return st
}

// readinessChecks decide /readyz. A worker is unready while it cannot be a
// working member: before it has joined the group (a rollout waits for the
// new pod to hold partitions before stopping the next one), while it
// drains after SIGTERM, and while PostgreSQL or the broker has not answered
// its probes for a few seconds (dependencies.go) — a member cut from either
// applies nothing, whatever its partitions' state says, and says so until
// the link heals. The partitions' retries and stops are advisory: reported
// in the body, not failing the probe (a stopped partition needs an
// operator, not a restart; alerts on effectively_partition_state cover
// them). Kubernetes scrapes and Prometheus' endpoint discovery keep
// reaching an unready pod, so its metrics still tell the story.
func readinessChecks(deps *dependencies, cons *consumer.Consumer) []httpserver.Check {
	return []httpserver.Check{
		{Name: "group", Func: func(context.Context) error {
			switch {
			case cons.Closing():
				return errors.New("shutting down: draining in-flight batches and leaving the group")
			case !cons.Joined():
				return errors.New("not yet joined the consumer group")
			}
			return nil
		}},
		{Name: "postgres", Func: func(context.Context) error { return deps.check("postgres") }},
		{Name: "kafka", Func: func(context.Context) error { return deps.check("kafka") }},
		{Name: "partitions", Advisory: true, Func: func(context.Context) error {
			var retrying, stopped []string
			for _, p := range cons.Status() {
				switch p.State {
				case consumer.StateRetrying:
					retrying = append(retrying, fmt.Sprintf("%s/%d (%s)", p.Topic, p.Partition, p.Cause))
				case consumer.StateStopped:
					stopped = append(stopped, fmt.Sprintf("%s/%d", p.Topic, p.Partition))
				}
			}
			sort.Strings(retrying)
			var parts []string
			if len(retrying) > 0 {
				parts = append(parts, "retrying a transient fault (paused): "+strings.Join(retrying, ", "))
			}
			if len(stopped) > 0 {
				parts = append(parts, "stopped, their position outside the log (see the worker's log): "+strings.Join(stopped, ", "))
			}
			if len(parts) > 0 {
				return fmt.Errorf("degraded: %s", strings.Join(parts, "; "))
			}
			return nil
		}},
	}
}
