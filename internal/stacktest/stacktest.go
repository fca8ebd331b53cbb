// Package stacktest finds the PostgreSQL and Kafka that real-stack tests run
// against: the addresses in EFFECTIVELY_TEST_POSTGRES_URL and
// EFFECTIVELY_TEST_KAFKA_BROKERS (`make test` exports the local stack's), or,
// when those are unset, a Docker engine answers and the test binary
// registered [Containers] (the end-to-end suites in test/ do, with
// testcontainers-go, which lives in that module so that the engine's module
// does not require Docker's client), containers started once per test
// binary. Without either, tests fail with the fix: they are never skipped
// silently.
package stacktest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Environment variables naming existing services.
const (
	PostgresURLEnv  = "EFFECTIVELY_TEST_POSTGRES_URL"
	KafkaBrokersEnv = "EFFECTIVELY_TEST_KAFKA_BROKERS"
)

// Container images of the services when they run in Docker (the same as
// docker-compose.yml).
const (
	PostgresImage = "postgres:15-alpine"
	KafkaImage    = "apache/kafka:4.4.0"
)

// ContainerStarter starts the services in containers (see [Containers]).
type ContainerStarter interface {
	// Postgres starts PostgreSQL and returns its URL.
	Postgres() (string, error)
	// Kafka starts a single-node Kafka and returns its address.
	Kafka() (string, error)
}

// TB is the part of testing.TB the stack's helpers use (a test kit's
// callers may have their own).
type TB interface {
	Helper()
	Name() string
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Containers, when set (in a test binary's TestMain or init, before the
// first test), starts the services in Docker when the environment names
// none and a Docker engine answers.
var Containers ContainerStarter

const missingHint = "set %s (run the tests with `make test`, or `stack/with-stack.sh go test ./...`, which start the local stack and export it); the suites in test/ also start containers when a Docker engine answers (`docker info` must succeed)"

var (
	pgOnce sync.Once
	pgURL  string
	pgErr  error

	kafkaOnce    sync.Once
	kafkaBrokers []string
	kafkaErr     error
)

// PostgresURL returns the URL of a PostgreSQL server for tests.
func PostgresURL(t TB) string {
	t.Helper()
	pgOnce.Do(func() {
		if u := os.Getenv(PostgresURLEnv); u != "" {
			pgURL = u
			return
		}
		if Containers == nil || !dockerUsable() {
			pgErr = fmt.Errorf("no PostgreSQL for tests: "+missingHint, PostgresURLEnv)
			return
		}
		pgURL, pgErr = Containers.Postgres()
	})
	if pgErr != nil {
		t.Fatalf("%v", pgErr)
	}
	return pgURL
}

// KafkaBrokers returns the seed brokers of a Kafka cluster for tests.
func KafkaBrokers(t TB) []string {
	t.Helper()
	kafkaOnce.Do(func() {
		if b := os.Getenv(KafkaBrokersEnv); b != "" {
			kafkaBrokers = strings.Split(b, ",")
			return
		}
		if Containers == nil || !dockerUsable() {
			kafkaErr = fmt.Errorf("no Kafka for tests: "+missingHint, KafkaBrokersEnv)
			return
		}
		var b string
		b, kafkaErr = Containers.Kafka()
		kafkaBrokers = []string{b}
	})
	if kafkaErr != nil {
		t.Fatalf("%v", kafkaErr)
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
