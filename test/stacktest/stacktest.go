// Package stacktest finds the PostgreSQL and Kafka that real-stack tests run
// against: the addresses in EFFECTIVELY_TEST_POSTGRES_URL and
// EFFECTIVELY_TEST_KAFKA_BROKERS (`make test` exports the local stack's), or,
// when those are unset and a Docker engine answers, containers started with
// testcontainers-go once per test binary. With neither, tests fail with the
// fix: they are never skipped silently.
package stacktest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-connections/nat"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Environment variables naming existing services.
const (
	PostgresURLEnv  = "EFFECTIVELY_TEST_POSTGRES_URL"
	KafkaBrokersEnv = "EFFECTIVELY_TEST_KAFKA_BROKERS"
)

// Container images used when Docker is available (the same as docker-compose.yml).
const (
	PostgresImage = "postgres:15-alpine"
	KafkaImage    = "apache/kafka:4.4.0"
)

const missingHint = "set %s (run the tests with `make test`, which starts the local stack and exports it) or make a Docker engine reachable (`docker info` must succeed)"

var (
	pgOnce sync.Once
	pgURL  string
	pgErr  error

	kafkaOnce    sync.Once
	kafkaBrokers []string
	kafkaErr     error
)

// PostgresURL returns the URL of a PostgreSQL server for tests.
func PostgresURL(t testing.TB) string {
	t.Helper()
	pgOnce.Do(func() {
		if u := os.Getenv(PostgresURLEnv); u != "" {
			pgURL = u
			return
		}
		if !dockerUsable() {
			pgErr = fmt.Errorf("no PostgreSQL for tests: "+missingHint, PostgresURLEnv)
			return
		}
		pgURL, pgErr = startPostgres()
	})
	if pgErr != nil {
		t.Fatal(pgErr)
	}
	return pgURL
}

// KafkaBrokers returns the seed brokers of a Kafka cluster for tests.
func KafkaBrokers(t testing.TB) []string {
	t.Helper()
	kafkaOnce.Do(func() {
		if b := os.Getenv(KafkaBrokersEnv); b != "" {
			kafkaBrokers = strings.Split(b, ",")
			return
		}
		if !dockerUsable() {
			kafkaErr = fmt.Errorf("no Kafka for tests: "+missingHint, KafkaBrokersEnv)
			return
		}
		var b string
		b, kafkaErr = startKafka()
		kafkaBrokers = []string{b}
	})
	if kafkaErr != nil {
		t.Fatal(kafkaErr)
	}
	return kafkaBrokers
}

// dockerUsable reports whether a Docker engine answers. The docker client
// exists on machines without an engine, so its presence proves nothing.
func dockerUsable() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info").Run() == nil
}

func startPostgres() (string, error) {
	ctx := context.Background()
	c, err := tcpostgres.Run(ctx, PostgresImage,
		tcpostgres.WithDatabase("effectively"),
		tcpostgres.WithUsername("effectively"),
		tcpostgres.WithPassword("effectively"),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		return "", fmt.Errorf("starting a PostgreSQL container (%s): %w", PostgresImage, err)
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
	c, err := testcontainers.Run(context.Background(), KafkaImage,
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
		return "", fmt.Errorf("starting a Kafka container (%s): %w", KafkaImage, err)
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
