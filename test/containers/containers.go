// Package containers starts the test services in Docker with
// testcontainers-go, for the end-to-end suites when no local stack is named
// (see internal/stacktest). It is in the test module so that the engine's
// module does not require Docker's client.
package containers

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-connections/nat"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/effectively-io/effectively/internal/stacktest"
)

func init() { stacktest.Containers = starter{} }

// starter implements stacktest.ContainerStarter.
type starter struct{}

func (starter) Postgres() (string, error) { return startPostgres() }
func (starter) Kafka() (string, error)    { return startKafka() }

func startPostgres() (string, error) {
	ctx := context.Background()
	c, err := tcpostgres.Run(ctx, stacktest.PostgresImage,
		tcpostgres.WithDatabase("effectively"),
		tcpostgres.WithUsername("effectively"),
		tcpostgres.WithPassword("effectively"),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		return "", fmt.Errorf("starting a PostgreSQL container (%s): %w", stacktest.PostgresImage, err)
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}

// startKafka runs a single KRaft node. Kafka advertises the address clients
// must use, so the host port is chosen before the container starts and bound
// explicitly.
func startKafka() (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	hostPort := strconv.Itoa(port)
	c, err := testcontainers.Run(context.Background(), stacktest.KafkaImage,
		testcontainers.WithExposedPorts("9092/tcp"),
		testcontainers.WithEnv(map[string]string{
			"KAFKA_NODE_ID":                                  "1",
			"KAFKA_PROCESS_ROLES":                            "broker,controller",
			"KAFKA_LISTENERS":                                "PLAINTEXT://:9092,CONTROLLER://:9093",
			"KAFKA_ADVERTISED_LISTENERS":                     "PLAINTEXT://127.0.0.1:" + hostPort,
			"KAFKA_CONTROLLER_LISTENER_NAMES":                "CONTROLLER",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":           "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                 "1@localhost:9093",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "1",
			"KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS":             "1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":         "0",
			"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                "false",
			"KAFKA_GROUP_CONSUMER_MIN_SESSION_TIMEOUT_MS":    "6000",
			"KAFKA_GROUP_CONSUMER_MIN_HEARTBEAT_INTERVAL_MS": "1000",
		}),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = nat.PortMap{"9092/tcp": []nat.PortBinding{{HostIP: "127.0.0.1", HostPort: hostPort}}}
		}),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("9092/tcp").WithStartupTimeout(2*time.Minute)),
	)
	if err != nil {
		return "", fmt.Errorf("starting a Kafka container (%s): %w", stacktest.KafkaImage, err)
	}
	_ = c // removed by testcontainers' reaper when the test binary exits
	return "127.0.0.1:" + hostPort, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
