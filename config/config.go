package config

import (
	"bytes"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/effectively-io/effectively/consumer"
	"github.com/effectively-io/effectively/internal/redact"
)

// Config is the whole effective configuration. Field tags are the key names
// (kafka.session_timeout is Config.Kafka.SessionTimeout).
type Config struct {
	// Kafka is the consumer group and its client limits.
	Kafka Kafka `mapstructure:"kafka"`
	// Postgres is the database the effects, claims and offsets live in.
	Postgres Postgres `mapstructure:"postgres"`
	// HTTP is the health, readiness and metrics server.
	HTTP HTTP `mapstructure:"http"`
	// Console is the operations console in the browser, served by the
	// admin server (http.addr) under /console/; off by default.
	Console Console `mapstructure:"console"`
	// Log is the process log.
	Log Log `mapstructure:"log"`
	// Redact is what is hidden, beyond the built-in rules, wherever a URL
	// may be printed or stored: logs, errors, outbox rows, dead letters,
	// /status, the console.
	Redact Redact `mapstructure:"redact"`
	// Shutdown is the graceful stop on SIGTERM/SIGINT.
	Shutdown Shutdown `mapstructure:"shutdown"`
	// Consumer is batching and input limits of the partition workers.
	Consumer Consumer `mapstructure:"consumer"`
	// Retry is the backoff for transient failures while a partition is paused.
	Retry Retry `mapstructure:"retry"`
	// Parking bounds events waiting for a prerequisite.
	Parking Parking `mapstructure:"parking"`
	// Dedupe is how long claims are kept, and how often the pruner deletes
	// what has outlived its retention.
	Dedupe Dedupe `mapstructure:"dedupe"`
	// Upstream describes the producers' retry behaviour, which bounds retention.
	Upstream Upstream `mapstructure:"upstream"`
	// Outbox is the delivery of side-effect intents (concurrency, timeouts,
	// leases) and how long finished ones are kept.
	Outbox Outbox `mapstructure:"outbox"`
	// Prefetch bounds the reads of fetch-on-event handlers (doorbells).
	Prefetch Prefetch `mapstructure:"prefetch"`
	// Targets are the build's named outbound HTTP endpoints: where its side
	// effects are sent (the outbox) and where its prefetchers read
	// (fetch-on-event). A build declares their names (see [Extension]);
	// each gets the keys targets.<name>.url and so on.
	Targets map[string]Target `mapstructure:"targets"`
	// SchemaRegistry is where topics of format avro, protobuf and
	// jsonschema (and debezium, for a registry converter's change events)
	// find their writers' schemas.
	SchemaRegistry SchemaRegistry `mapstructure:"schema_registry"`
	// Topics are per-topic settings (file only, the topics: list). A topic in
	// kafka.topics without an entry gets the build's default entry for it
	// (service.App.Defaults), if any, else the defaults; see
	// [Config.TopicSettings]. A file's entry wins over the build's of the
	// same name.
	Topics []Topic `mapstructure:"topics"`
	// Sinks map event types to tables with no code (file only, the sinks:
	// list); see [Sink].
	Sinks []Sink `mapstructure:"sinks"`
}

// Kafka configures the consumer group member.
type Kafka struct {
	// Brokers are the seed brokers, each host:port.
	Brokers []string `mapstructure:"brokers"`
	// Group is the consumer group ID; every member of the group shares it.
	Group string `mapstructure:"group"`
	// Topics are the topics consumed; each gets default topic settings unless
	// a topics: entry overrides them.
	Topics []string `mapstructure:"topics"`
	// InstanceID enables static membership (e.g. the pod name), so a restart
	// within the session timeout does not rebalance. Empty means dynamic.
	InstanceID string `mapstructure:"instance_id"`
	// LeaveOnShutdown makes a static member (kafka.instance_id set) leave
	// the group on SIGTERM, by its instance ID (KIP-345), so that its
	// partitions move to the other members at once instead of after
	// kafka.session_timeout. Set it where graceful stops are mostly
	// removals (autoscaled StatefulSets); a crash still keeps static
	// membership's no-rebalance restart. A dynamic member always leaves.
	LeaveOnShutdown bool `mapstructure:"leave_on_shutdown"`
	// GroupProtocol is "classic" or "consumer" (KIP-848, broker-side assignment).
	GroupProtocol string `mapstructure:"group_protocol"`
	// StartOffset is where a partition without a stored offset starts:
	// "earliest" or "latest".
	StartOffset string `mapstructure:"start_offset"`
	// OffsetOutOfRange is what a partition does when its position is
	// outside its log: "stop" (alert and apply nothing) or "log-start"
	// (records deleted unprocessed are skipped; a recreated topic still
	// stops).
	OffsetOutOfRange string `mapstructure:"offset_out_of_range"`
	// MetadataMaxAge is how often topic metadata is refreshed, and so how
	// soon a topic's new partitions are noticed.
	MetadataMaxAge time.Duration `mapstructure:"metadata_max_age"`
	// SessionTimeout is how long the broker waits for heartbeats before it
	// evicts the member.
	SessionTimeout time.Duration `mapstructure:"session_timeout"`
	// RebalanceTimeout is how long members get to finish revoking during a
	// rebalance (classic protocol only; under KIP-848 the broker decides).
	RebalanceTimeout time.Duration `mapstructure:"rebalance_timeout"`
	// ClientID names the client in broker logs and quotas.
	ClientID string `mapstructure:"client_id"`
	// FetchMaxBytes caps the bytes one fetch response may buffer, across
	// partitions: the memory bound against a hostile topic.
	FetchMaxBytes int32 `mapstructure:"fetch_max_bytes"`
	// FetchMaxPartitionBytes caps the bytes buffered per partition per fetch.
	FetchMaxPartitionBytes int32 `mapstructure:"fetch_max_partition_bytes"`
	// TLS is encryption and certificate checks of the broker connections.
	TLS KafkaTLS `mapstructure:"tls"`
	// SASL is how the clients authenticate to the brokers.
	SASL KafkaSASL `mapstructure:"sasl"`
}

// Postgres configures the database connection pool.
type Postgres struct {
	// URL is a postgres:// URL or a libpq keyword/value DSN. It holds the
	// password; use [Config.Redacted] before printing it.
	URL string `mapstructure:"url"`
	// MaxConns is the pool size; 0 sizes it from the owned partitions plus the
	// dispatcher, relay and pruner.
	MaxConns int32 `mapstructure:"max_conns"`
	// AnswerTimeout bounds how long a worker's connection waits without
	// progress — no byte of an answer, no chunk of a request taken —
	// before it gives the connection up and makes a new one (the batch
	// retries). It is what turns a link that takes bytes and never answers
	// — half-open, a hung server, a silent firewall — into a reconnect;
	// neither TCP keep-alives nor statement_timeout see those. A slow link
	// that moves bytes is not cut. The wait for an answer includes a whole
	// pipeline of statements (a batch's effects are sent as one, and the
	// server answers at its end), so raise it with statement_timeout if
	// batches legitimately take longer. 0 (the default) derives it from the
	// session's statement_timeout (60s unless postgres.url sets one) plus
	// 15s, or 1h when the session has no statement timeout; a value set
	// here must exceed statement_timeout. Connecting (TCP, TLS and the
	// start-up) is bounded by connect_timeout in postgres.url, 10s when it
	// sets none.
	AnswerTimeout time.Duration `mapstructure:"answer_timeout"`
	// PasswordFile is a file holding the password (a mounted secret), read
	// at start-up, so that postgres.url carries none; set one or the other.
	PasswordFile string `mapstructure:"password_file"`
	// Migrations are directories of SQL migrations (goose's format) that
	// migrate applies after the engine's and the build's, each with its own
	// version table (<directory name>_schema_version): the tables of
	// config-only sinks, with no code.
	Migrations []string `mapstructure:"migrations"`
}

// HTTP configures the health, readiness and metrics server.
type HTTP struct {
	// Addr is the admin server's listen address, host:port; empty disables
	// it. It serves only /healthz, /readyz, /metrics and /status (and
	// /debug/pprof when http.pprof is on), nothing that changes state —
	// and, when console.enabled is on, the console under /console/. The
	// default, 127.0.0.1:9410, keeps it on the laptop; in a pod set
	// 0.0.0.0:<admin port> (the chart uses 0.0.0.0:9090) so probes and
	// scrapes reach it, on a port that carries nothing else.
	Addr string `mapstructure:"addr"`
	// Pprof mounts Go's profiling endpoints (/debug/pprof/) on Addr. They
	// are unauthenticated: whoever reaches Addr can read goroutine stacks
	// and heap profiles and make the process spend CPU on profiling. Turn it
	// on only where Addr is reachable by operators alone; off by default.
	Pprof bool `mapstructure:"pprof"`
}

// Console configures the operations console: pages of the group's state
// (the data of `status`, dead letters, parked events, outbox intents, a
// replay planner, an audit, the operator-action log) and the actions of the
// CLI's commands, each recorded in the operator-action log.
type Console struct {
	// Enabled serves the console at /console/ on the admin server
	// (http.addr). Off by default: when off, no console route exists.
	Enabled bool `mapstructure:"enabled"`
	// TokenFile is a file of the tokens that may sign in: one per line,
	// name:token (the name is the operator the action log records) or a
	// lone token (recorded as operator). Blank lines and lines starting
	// with # are skipped. It is read at each sign-in, so a token can be
	// added or revoked without a restart (signed-in sessions last 12 h).
	// Required when the console is on, unless
	// console.localhost_without_token allows a loopback http.addr without.
	TokenFile string `mapstructure:"token_file"`
	// LocalhostWithoutToken lets the console run without a token when
	// http.addr is a loopback address (127.0.0.1, ::1, localhost): whoever
	// can reach the port is the operator "localhost". For a laptop only.
	LocalhostWithoutToken bool `mapstructure:"localhost_without_token"`
	// AllowedHosts are the names the console answers to besides localhost,
	// 127.0.0.1 and [::1] on the port it listens on: each a host name or IP
	// address (any port) or host:port (that port only), such as
	// console.example.com or localhost:8080. A request whose Host header is
	// none of them is refused with 421 before anything else runs, so that a
	// page on another site cannot reach the console through DNS rebinding
	// (a name of the attacker's that resolves to 127.0.0.1). Checked always
	// when the console runs without a token (console.localhost_without_token);
	// with console.token_file, checked only when set. Set it when browsers
	// reach the console by a name: a reverse proxy that keeps the browser's
	// Host, or a port-forward to another local port.
	AllowedHosts []string `mapstructure:"allowed_hosts"`
	// CookieSecure marks the session cookie Secure (the browser sends it
	// only over https) also when the request reached the console over plain
	// HTTP: set it when a proxy that terminates TLS serves the console over
	// https. A request that arrives over TLS gets a Secure cookie anyway.
	// Leave it off when browsers reach the console over http: they do not
	// keep a Secure cookie there (except on localhost), so sign-in would not
	// stick.
	CookieSecure bool `mapstructure:"cookie_secure"`
	// HistoryInterval is how often the worker samples its throughput by
	// disposition for the Overview's chart (an hour of samples is kept in
	// memory, only while the console is on).
	HistoryInterval time.Duration `mapstructure:"history_interval"`
}

// ConsoleHistoryIntervalDefault is the default of console.history_interval.
const ConsoleHistoryIntervalDefault = 15 * time.Second

// Shutdown configures the graceful stop.
type Shutdown struct {
	// DrainTimeout bounds the wait for in-flight batches to commit after
	// SIGTERM; past it they are cancelled (rolled back, redone by the next
	// owner). Keep it well inside the orchestrator's grace period (30 s in
	// Kubernetes by default): the member must still leave the group and
	// exit before it is killed.
	DrainTimeout time.Duration `mapstructure:"drain_timeout"`
}

// ShutdownDrainTimeoutDefault is the default of shutdown.drain_timeout:
// the consumer's own.
const ShutdownDrainTimeoutDefault = consumer.DrainTimeoutDefault

// Log configures the process logger.
type Log struct {
	// Level is the lowest level logged: debug, info, warn or error.
	Level string `mapstructure:"level"`
	// Format is "json" or "console" (human-readable).
	Format string `mapstructure:"format"`
}

// Redact configures redaction (package redact) beyond its built-in rules.
type Redact struct {
	// Params are more query parameter names whose values are hidden, in
	// addition to the built-in list (password, token, key, secret, sig,
	// signature, code, X-Amz-*… see docs/security.md); compared
	// case-insensitively, ignoring '-', '_' and '.'.
	Params []string `mapstructure:"params"`
}

// Consumer configures the partition workers.
type Consumer struct {
	// BatchMaxRecords is the most records applied in one transaction.
	BatchMaxRecords int `mapstructure:"batch_max_records"`
	// BatchLinger is how long a worker waits to fill a batch before applying
	// what it has.
	BatchLinger time.Duration `mapstructure:"batch_linger"`
	// MaxPayloadBytes is the largest record value, and the largest record
	// key, accepted; larger records are dead-lettered.
	MaxPayloadBytes int `mapstructure:"max_payload_bytes"`
	// MaxInflightBytes bounds the bytes of records (keys and values) a
	// worker process holds across all its partitions, fetched and not yet
	// applied: once they reach it every partition pauses fetching until
	// half of it is applied. Half of it bounds, apart, the data that
	// registry formats' records decode to beyond their bytes (a batch past
	// it is applied in parts). It sizes the process's memory with large
	// records (docs/operations/capacity.md#memory); small events rarely
	// reach it.
	MaxInflightBytes int `mapstructure:"max_inflight_bytes"`
	// RevokeTimeout bounds the wait for a revoked partition's worker to stop;
	// it must end well inside kafka.rebalance_timeout.
	RevokeTimeout time.Duration `mapstructure:"revoke_timeout"`
	// CheckPartitioner checks each record's key against murmur2 and warns on a
	// mismatch (a producer with another partitioner breaks per-resource order).
	CheckPartitioner bool `mapstructure:"check_partitioner"`
}

// Retry configures the backoff for transient failures.
type Retry struct {
	// Initial is the first backoff.
	Initial time.Duration `mapstructure:"initial"`
	// Max is the longest backoff.
	Max time.Duration `mapstructure:"max"`
}

// Parking bounds parked events; past a bound an event is dead-lettered with
// reason prerequisite_missing.
type Parking struct {
	// MaxAge is how long an event may stay parked.
	MaxAge time.Duration `mapstructure:"max_age"`
	// MaxAttempts is how often a parked event may be retried.
	MaxAttempts int `mapstructure:"max_attempts"`
	// MaxPerResource is how many events one resource may have parked.
	MaxPerResource int `mapstructure:"max_per_resource"`
}

// Dedupe configures claim retention. Retention must be at least
// 2 × upstream.max_retry_horizon + reconciliation_window.
type Dedupe struct {
	// Retention is how long claims (and dead letters, resolved parked events)
	// are kept.
	Retention time.Duration `mapstructure:"retention"`
	// ReconciliationWindow is the slack for late reconciliation runs.
	ReconciliationWindow time.Duration `mapstructure:"reconciliation_window"`
	// PruneInterval is the time between two passes of the background pruner
	// in run, which deletes what has outlived dedupe.retention (and
	// outbox.retention).
	PruneInterval time.Duration `mapstructure:"prune_interval"`
	// GenerationInterval is how long a claims generation takes new claims
	// before the pruner closes it and opens the next; a closed generation
	// is dropped whole once it has been closed for dedupe.retention. A
	// claim is kept between dedupe.retention and dedupe.retention +
	// generation_interval (+ a prune interval); every claim also checks the
	// generations before the open one, retention / generation_interval of
	// them. 0 means dedupe.retention / 2.
	GenerationInterval time.Duration `mapstructure:"generation_interval"`
}

// ClaimGenerationInterval is dedupe.generation_interval with its default
// (dedupe.retention / 2) applied.
func (d Dedupe) ClaimGenerationInterval() time.Duration {
	if d.GenerationInterval > 0 {
		return d.GenerationInterval
	}
	return d.Retention / 2
}

// Upstream describes the producers.
type Upstream struct {
	// MaxRetryHorizon is the longest time any producer keeps retrying (or a
	// provider keeps redelivering) one event.
	MaxRetryHorizon time.Duration `mapstructure:"max_retry_horizon"`
}

// Outbox configures side-effect intents.
type Outbox struct {
	// Retention is how long sent and suppressed intents are kept. An event
	// whose record is older than this when it is applied (a replay of old
	// history, whose intents may have been pruned) records its intents as
	// suppressed, not sent, unless ResendExpired.
	Retention time.Duration `mapstructure:"retention"`
	// ResendExpired sends the side effects of events older than Retention
	// again: the explicit choice a replay of old history needs to re-fire
	// them (default false: they are recorded as suppressed).
	ResendExpired bool `mapstructure:"resend_expired"`
	// Concurrency is the most side-effect calls in flight per worker.
	Concurrency int `mapstructure:"concurrency"`
	// CallTimeout bounds one side-effect call.
	CallTimeout time.Duration `mapstructure:"call_timeout"`
	// LeaseGrace is added to CallTimeout for the lease of an intent being
	// sent: a dispatcher that has not recorded the outcome by then is
	// presumed dead (an idempotent call is retried, any other becomes
	// unknown).
	LeaseGrace time.Duration `mapstructure:"lease_grace"`
	// MaxAttempts is how many times an intent that keeps failing
	// transiently (5xx, 429, timeouts, connection refused) is attempted:
	// its next failure after that dead-letters it with its last status and
	// error, and its resource's later intents are no longer held back.
	// outbox retry queues it again, its attempts restarted.
	MaxAttempts int `mapstructure:"max_attempts"`
	// MaxAge is how long after it was recorded an intent that keeps failing
	// transiently is retried: its next failure after that dead-letters it,
	// as for MaxAttempts. An intent outbox retry queues past this age gets
	// one attempt.
	MaxAge time.Duration `mapstructure:"max_age"`
}

// Prefetch bounds fetch-on-event: the reads a prefetcher (a doorbell) makes
// from a target before its event's transaction.
type Prefetch struct {
	// MaxAttempts is how many times one event's prefetch may fail
	// transiently (5xx, 429, timeout, connection refused) while the source
	// answers other events' prefetches, before the event is dead-lettered
	// with reason source_unavailable (its partition moves on; dlq redrive
	// re-applies it). Failures while the source answers nobody (an outage)
	// do not count: the batch is retried with backoff, as for any transient
	// fault.
	MaxAttempts int `mapstructure:"max_attempts"`
}

// Target is a named outbound HTTP endpoint.
type Target struct {
	// URL is the absolute http or https base URL; empty means not
	// configured (the build decides what that means: no such side effect,
	// or dead letters until it is set).
	URL string `mapstructure:"url"`
	// BearerTokenFile is a file holding a token sent as "Authorization:
	// Bearer <token>"; read at each delivery, so a rotated secret applies
	// to pending intents too.
	BearerTokenFile string `mapstructure:"bearer_token_file"`
	// HeaderFiles are headers whose values come from files, each
	// "Name=/path/to/file" (an API key, say); read at each delivery.
	HeaderFiles []string `mapstructure:"header_files"`
	// CAFile is a PEM bundle the target's certificate must chain to,
	// instead of the system's roots.
	CAFile string `mapstructure:"ca_file"`
	// CertFile and KeyFile are a client certificate for mutual TLS with the
	// target (PEM), reloaded at every handshake.
	CertFile string `mapstructure:"cert_file"`
	// KeyFile is the client certificate's private key (PEM).
	KeyFile string `mapstructure:"key_file"`
	// SecretPathPrefix marks every path segment after it as a secret in
	// URLs to this target's host, wherever a URL is printed or stored: for a
	// webhook whose path is its credential ("/hooks/" for
	// https://chat.example.com/hooks/<key>). Slack's /services/,
	// Discord's /api/webhooks/ and Telegram's bot paths are recognised
	// without it.
	SecretPathPrefix string `mapstructure:"secret_path_prefix"`
}

// Topic formats.
const (
	// FormatCloudEvents is CloudEvents 1.0, structured or binary mode.
	FormatCloudEvents = "cloudevents"
	// FormatJSON is any JSON object, mapped with JSON pointers.
	FormatJSON = "json"
)

// Key strategies: where the dedupe key of an event comes from.
const (
	// KeyStrategyCloudEvents keys by the CloudEvents (source, id).
	KeyStrategyCloudEvents = "cloudevents"
	// KeyStrategyField keys by a provider ID field (key_pointer).
	KeyStrategyField = "field"
	// KeyStrategyNatural keys by a natural key made of several fields (natural_key).
	KeyStrategyNatural = "natural"
	// KeyStrategyContentHash keys by the hash of the canonical payload; the
	// last resort, warned about at start-up.
	KeyStrategyContentHash = "content-hash"
	// KeyStrategyPosition keys a change event by its position in the
	// source's log and its row (format debezium, and only it).
	KeyStrategyPosition = "position"
)

// The consumer's enums, as the configuration spells them (the consumer's
// own constants: one value each).
const (
	// GroupProtocolClassic is the client-side assignment protocol.
	GroupProtocolClassic = consumer.GroupProtocolClassic
	// GroupProtocolConsumer is KIP-848, broker-side assignment.
	GroupProtocolConsumer = consumer.GroupProtocolConsumer
	// StartOffsetEarliest starts a partition without a stored offset at
	// the log start.
	StartOffsetEarliest = consumer.StartOffsetEarliest
	// StartOffsetLatest starts it at the high watermark.
	StartOffsetLatest = consumer.StartOffsetLatest
	// OffsetOutOfRangeStop stops a partition whose position is outside
	// its log, with an alert.
	OffsetOutOfRangeStop = consumer.OutOfRangeStop
	// OffsetOutOfRangeLogStart skips records deleted unprocessed.
	OffsetOutOfRangeLogStart = consumer.OutOfRangeLogStart
)

// Topic is the per-topic settings: how records are decoded and keyed, and
// where dead letters go. JSON pointers (RFC 6901) select from the record's
// JSON value; for format cloudevents they select from data.
type Topic struct {
	// Name is the topic; it must be listed in kafka.topics.
	Name string `mapstructure:"name"`
	// Format is "cloudevents" (default), "json", or a registry format:
	// "avro", "protobuf" or "jsonschema" (the Confluent wire format, with
	// schemas from schema_registry). A registry format's payload, as JSON,
	// is mapped by the pointers as format json's is; without type_pointer
	// its records must be CloudEvents in binary mode (ce_ headers).
	// "debezium" reads Debezium's PostgreSQL change events (JSON, with or
	// without schemas; with schema_registry.url also a registry
	// converter's Avro, Protobuf or JSON Schema, value and key), mapped the
	// same for every table: no pointers.
	Format string `mapstructure:"format"`
	// KeyStrategy is "cloudevents" (default), "field", "natural" or
	// "content-hash". Format json needs one of the last three; format
	// debezium takes "position" (its default) only.
	KeyStrategy string `mapstructure:"key_strategy"`
	// IDPointer selects the event ID (format json); with key strategy field
	// it is the key unless KeyPointer is set.
	IDPointer string `mapstructure:"id_pointer"`
	// TypePointer selects the event type (format json, required; registry
	// formats, unless their records are CloudEvents in binary mode).
	TypePointer string `mapstructure:"type_pointer"`
	// SubjectPointer selects the resource ID (format json, required).
	SubjectPointer string `mapstructure:"subject_pointer"`
	// VersionPointer selects the resource version (format json); empty means
	// the events are not versioned.
	VersionPointer string `mapstructure:"version_pointer"`
	// KeyPointer selects the dedupe key for key strategy field.
	KeyPointer string `mapstructure:"key_pointer"`
	// NaturalKey are the pointers whose values together make the dedupe key
	// for key strategy natural.
	NaturalKey []string `mapstructure:"natural_key"`
	// DLQ is the dead-letter topic; default "<name>.dlq".
	DLQ string `mapstructure:"dlq"`
	// CheckPartitioner overrides consumer.check_partitioner for this topic;
	// nil means inherit.
	CheckPartitioner *bool `mapstructure:"check_partitioner"`
	// RequireSubject dead-letters CloudEvents without a subject
	// (missing_subject). Without it an event's resource ID is its subject,
	// else its partitionkey extension (the CloudEvents SDK's Kafka binding
	// sets that, not subject), else the record key.
	RequireSubject bool `mapstructure:"require_subject"`
}

// HTTPPprofDefault is the default of http.pprof: profiles are not served.
const HTTPPprofDefault = false

const (
	kib = 1 << 10
	mib = 1 << 20
)

// Default returns the engine's embedded defaults: the local stack `make
// stack-up` starts and the HTTP server on localhost. A build adds its own
// (its topics) through [Extension].Defaults.
func Default() Config {
	return Config{
		Kafka: Kafka{
			Brokers:                []string{"127.0.0.1:19092"},
			Group:                  "effectively",
			GroupProtocol:          GroupProtocolClassic,
			StartOffset:            StartOffsetEarliest,
			OffsetOutOfRange:       OffsetOutOfRangeStop,
			MetadataMaxAge:         time.Minute,
			SessionTimeout:         45 * time.Second,
			RebalanceTimeout:       60 * time.Second,
			ClientID:               "effectively",
			FetchMaxBytes:          50 * mib,
			FetchMaxPartitionBytes: 1 * mib,
			SASL:                   KafkaSASL{Mechanism: SASLMechanismNone},
		},
		Postgres: Postgres{
			URL:        "postgres://effectively:effectively@127.0.0.1:15432/effectively?sslmode=disable",
			Migrations: []string{},
		},
		HTTP:           HTTP{Addr: "127.0.0.1:9410", Pprof: HTTPPprofDefault},
		SchemaRegistry: SchemaRegistry{Timeout: SchemaRegistryTimeoutDefault},
		Console:        Console{AllowedHosts: []string{}, HistoryInterval: ConsoleHistoryIntervalDefault},
		Log:            Log{Level: "info", Format: "json"},
		Redact:         Redact{Params: []string{}},
		Shutdown:       Shutdown{DrainTimeout: ShutdownDrainTimeoutDefault},
		Consumer: Consumer{
			BatchMaxRecords:  500,
			BatchLinger:      5 * time.Millisecond,
			MaxPayloadBytes:  1 * mib,
			MaxInflightBytes: consumer.MaxInflightBytesDefault,
			RevokeTimeout:    10 * time.Second,
			CheckPartitioner: true,
		},
		Retry:    Retry{Initial: consumer.RetryInitialDefault, Max: consumer.RetryMaxDefault},
		Parking:  Parking{MaxAge: 24 * time.Hour, MaxAttempts: 20, MaxPerResource: 1000},
		Dedupe:   Dedupe{Retention: 14 * 24 * time.Hour, ReconciliationWindow: 24 * time.Hour, PruneInterval: time.Minute},
		Upstream: Upstream{MaxRetryHorizon: 72 * time.Hour},
		Outbox: Outbox{Retention: 14 * 24 * time.Hour, Concurrency: 8, CallTimeout: 10 * time.Second, LeaseGrace: 30 * time.Second,
			MaxAttempts: OutboxMaxAttemptsDefault, MaxAge: OutboxMaxAgeDefault},
		Prefetch: Prefetch{MaxAttempts: PrefetchMaxAttemptsDefault},
	}
}

// TopicSettings returns the settings of the named topic with the defaults
// filled in: format and key strategy cloudevents, dlq "<name>.dlq",
// CheckPartitioner from consumer.check_partitioner (never nil), and, for key
// strategy field, KeyPointer from IDPointer when only that is set. The first
// topics: entry with the name wins; a name without an entry gets the defaults.
func (c Config) TopicSettings(name string) Topic {
	t := Topic{Name: name}
	for _, e := range c.Topics {
		if e.Name == name {
			t = e
			break
		}
	}
	t.NaturalKey = append([]string(nil), t.NaturalKey...)
	if t.Format == "" {
		t.Format = FormatCloudEvents
	}
	if t.KeyStrategy == "" {
		t.KeyStrategy = KeyStrategyCloudEvents
		if t.Format == FormatDebezium {
			t.KeyStrategy = KeyStrategyPosition
		}
	}
	if t.KeyStrategy == KeyStrategyField && t.KeyPointer == "" {
		t.KeyPointer = t.IDPointer
	}
	if t.DLQ == "" {
		t.DLQ = name + ".dlq"
	}
	check := c.Consumer.CheckPartitioner
	if t.CheckPartitioner != nil {
		check = *t.CheckPartitioner
	}
	t.CheckPartitioner = &check
	return t
}

// redactedPassword replaces passwords in [Config.Redacted].
const redactedPassword = "xxxxx"

// Redacted returns a copy of c with the credentials in every URL field
// (postgres.url, targets.*.url: see [Config.RedactPolicy]) and every
// secret key (kafka.sasl.password) replaced by "xxxxx". Everything else is
// kept.
func (c Config) Redacted() Config {
	r := c.clone()
	p := c.RedactPolicy()
	rv := reflect.ValueOf(&r).Elem()
	for _, l := range leaves {
		switch f := rv.FieldByIndex(l.index); {
		case isURLKey(l.key):
			f.SetString(p.URL(f.String()))
		case isSecretKey(l.key):
			f.SetString(redactValue(l.key, f.String()))
		}
	}
	for n, t := range r.Targets {
		t.URL = p.URL(t.URL)
		r.Targets[n] = t
	}
	return r
}

// clone copies c deeply enough that changing the copy's slices does not
// change c.
func (c Config) clone() Config {
	r := c
	r.Kafka.Brokers = append([]string(nil), c.Kafka.Brokers...)
	r.Kafka.Topics = append([]string(nil), c.Kafka.Topics...)
	r.Redact.Params = slices.Clone(c.Redact.Params)
	if c.Targets != nil {
		r.Targets = make(map[string]Target, len(c.Targets))
		for n, t := range c.Targets {
			r.Targets[n] = t
		}
	}
	if c.Topics != nil {
		r.Topics = make([]Topic, len(c.Topics))
		for i, t := range c.Topics {
			t.NaturalKey = append([]string(nil), t.NaturalKey...)
			if t.CheckPartitioner != nil {
				b := *t.CheckPartitioner
				t.CheckPartitioner = &b
			}
			r.Topics[i] = t
		}
	}
	if c.Sinks != nil {
		r.Sinks = make([]Sink, len(c.Sinks))
		for i, s := range c.Sinks {
			s.Types = slices.Clone(s.Types)
			s.Key = slices.Clone(s.Key)
			s.Touch = slices.Clone(s.Touch)
			s.Columns = slices.Clone(s.Columns)
			r.Sinks[i] = s
		}
	}
	return r
}

func isURLKey(key string) bool { return key == "url" || strings.HasSuffix(key, ".url") }

// redactURL hides the credentials of a URL or DSN (see redact.URL).
func redactURL(s string) string { return redact.URL(s) }

// Dump renders the configuration as YAML with the key names [Load] reads, in
// the order of the struct. Passwords are always redacted (see
// [Config.Redacted]); topics entries leave out unset fields.
func (c Config) Dump() ([]byte, error) {
	node, err := yamlNode(reflect.ValueOf(c.Redacted()), false)
	if err != nil {
		return nil, fmt.Errorf("rendering config: %w", err)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(node); err != nil {
		return nil, fmt.Errorf("rendering config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("rendering config: %w", err)
	}
	return buf.Bytes(), nil
}

// yamlNode renders v as a YAML node, mapping struct fields by their
// mapstructure tags. omitEmpty leaves out zero fields (used inside topics).
func yamlNode(v reflect.Value, omitEmpty bool) (*yaml.Node, error) {
	switch {
	case v.Kind() == reflect.Struct:
		m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for i := range v.NumField() {
			sf := v.Type().Field(i)
			fv := v.Field(i)
			if omitEmpty && (fv.IsZero() || (fv.Kind() == reflect.Slice && fv.Len() == 0)) {
				continue
			}
			child, err := yamlNode(fv, sf.Type.Kind() == reflect.Slice && sf.Type.Elem().Kind() == reflect.Struct)
			if err != nil {
				return nil, err
			}
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: tagName(sf)}, child)
		}
		return m, nil
	case v.Kind() == reflect.Map:
		m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, k := range keys {
			child, err := yamlNode(v.MapIndex(k), omitEmpty)
			if err != nil {
				return nil, err
			}
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k.String()}, child)
		}
		return m, nil
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct:
		s := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i := range v.Len() {
			child, err := yamlNode(v.Index(i), omitEmpty)
			if err != nil {
				return nil, err
			}
			s.Content = append(s.Content, child)
		}
		return s, nil
	case v.Kind() == reflect.Slice:
		// An empty list renders as [] rather than null, so the dump reads back
		// as the same (empty) list.
		s := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
		for i := range v.Len() {
			child, err := yamlNode(v.Index(i), false)
			if err != nil {
				return nil, err
			}
			s.Content = append(s.Content, child)
		}
		if v.Len() > 0 {
			s.Style = 0
		}
		return s, nil
	case v.Type() == durationType:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: shortDur(time.Duration(v.Int()))}, nil
	case v.Kind() == reflect.Pointer && v.IsNil():
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	case v.Kind() == reflect.Pointer:
		return yamlNode(v.Elem(), omitEmpty)
	default:
		n := &yaml.Node{}
		if err := n.Encode(v.Interface()); err != nil {
			return nil, err
		}
		return n, nil
	}
}

// tagName is a struct field's key segment: its mapstructure tag.
func tagName(sf reflect.StructField) string {
	name, _, _ := strings.Cut(sf.Tag.Get("mapstructure"), ",")
	if name == "" {
		return strings.ToLower(sf.Name)
	}
	return name
}

// RedactURL hides the credentials in a URL or DSN (see redact.URL).
func RedactURL(s string) string { return redact.URL(s) }

// RedactPolicy is what c adds to the built-in redaction: redact.params, and
// each target's secret_path_prefix for its URL's host. A worker makes it
// the process's policy (redact.SetDefault) before anything is printed.
func (c Config) RedactPolicy() redact.Policy {
	p := redact.Policy{Params: slices.Clone(c.Redact.Params)}
	names := make([]string, 0, len(c.Targets))
	for n := range c.Targets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t := c.Targets[n]
		if t.SecretPathPrefix == "" {
			continue
		}
		if u, err := url.Parse(t.URL); err == nil && u.Hostname() != "" {
			p.Paths = append(p.Paths, redact.PathRule{Host: u.Hostname(), Prefix: t.SecretPathPrefix})
		}
	}
	return p
}
