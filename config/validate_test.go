package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDefaultValidates(t *testing.T) {
	t.Parallel()

	require.NoError(t, testDefault().Validate())
}

func TestFieldErrorFormat(t *testing.T) {
	t.Parallel()

	c := testDefault()
	c.Kafka.SessionTimeout = 2 * time.Second
	err := c.Validate()
	var fe *FieldError
	require.True(t, errors.As(err, &fe))
	require.Equal(t,
		`config: kafka.session_timeout = "2s": must be between 6s and 30m (the broker's group.min/max.session.timeout.ms); fix: set kafka.session_timeout (env EFFECTIVELY_KAFKA_SESSION_TIMEOUT) to e.g. 45s`,
		err.Error())
}

func TestValidate(t *testing.T) {
	t.Parallel()

	boolp := func(b bool) *bool { return &b }
	tests := []struct {
		name   string
		mutate func(c *Config)
		key    string
		want   []string // substrings of the message: value, problem, fix
	}{
		{
			name:   "out-of-range duration",
			mutate: func(c *Config) { c.Kafka.RebalanceTimeout = time.Hour },
			key:    "kafka.rebalance_timeout",
			want:   []string{`"1h0m0s"`, "between 1s and 30m", "EFFECTIVELY_KAFKA_REBALANCE_TIMEOUT", "e.g. 1m"},
		},
		{
			name:   "out-of-range int",
			mutate: func(c *Config) { c.Consumer.BatchMaxRecords = 0 },
			key:    "consumer.batch_max_records",
			want:   []string{`"0"`, "between 1 and 100000", "env EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS, flag --consumer-batch-max-records", "e.g. 500"},
		},
		{
			name:   "bad enum lists the allowed values",
			mutate: func(c *Config) { c.Log.Level = "verbose" },
			key:    "log.level",
			want:   []string{`"verbose"`, "must be one of debug, info, warn, error", "EFFECTIVELY_LOG_LEVEL", "--log-level"},
		},
		{
			name:   "bad group protocol",
			mutate: func(c *Config) { c.Kafka.GroupProtocol = "kip848" },
			key:    "kafka.group_protocol",
			want:   []string{`"kip848"`, "classic, consumer"},
		},
		{
			name:   "bad host:port",
			mutate: func(c *Config) { c.Kafka.Brokers = []string{"nohost"} },
			key:    "kafka.brokers",
			want:   []string{`"nohost"`, "not host:port (missing port in address)", "EFFECTIVELY_KAFKA_BROKERS", "e.g. 127.0.0.1:19092"},
		},
		{
			name:   "broker without port number",
			mutate: func(c *Config) { c.Kafka.Brokers = []string{"a:1", "b:kafka"} },
			key:    "kafka.brokers",
			want:   []string{`"b:kafka"`, `port "kafka"`},
		},
		{
			name:   "no brokers",
			mutate: func(c *Config) { c.Kafka.Brokers = nil },
			key:    "kafka.brokers",
			want:   []string{"at least one broker"},
		},
		{
			name:   "bad URL scheme",
			mutate: func(c *Config) { c.Postgres.URL = "mysql://root:hunter2@db:3306/x" },
			key:    "postgres.url",
			want:   []string{`"mysql://root:xxxxx@db:3306/x"`, `scheme "mysql"`, "EFFECTIVELY_POSTGRES_URL", "--postgres-url"},
		},
		{
			name:   "DSN without host",
			mutate: func(c *Config) { c.Postgres.URL = "dbname=x password=hunter2" },
			key:    "postgres.url",
			want:   []string{"password=xxxxx", "keyword/value DSN with host="},
		},
		{
			name:   "max conns out of range",
			mutate: func(c *Config) { c.Postgres.MaxConns = -1 },
			key:    "postgres.max_conns",
			want:   []string{`"-1"`, "0 (sized from the owned partitions) or between 1 and 1000"},
		},
		{
			name:   "empty required",
			mutate: func(c *Config) { c.Kafka.Group = "" },
			key:    "kafka.group",
			want:   []string{`""`, "must not be empty", "EFFECTIVELY_KAFKA_GROUP", "e.g. effectively"},
		},
		{
			name:   "bad http addr",
			mutate: func(c *Config) { c.HTTP.Addr = "localhost:99999" },
			key:    "http.addr",
			want:   []string{`"localhost:99999"`, "between 0 and 65535", "empty disables"},
		},
		{
			name:   "pprof without http server",
			mutate: func(c *Config) { c.HTTP.Addr, c.HTTP.Pprof = "", true },
			key:    "http.pprof",
			want:   []string{`"true"`, "needs the HTTP server", "EFFECTIVELY_HTTP_ADDR", "EFFECTIVELY_HTTP_PPROF"},
		},
		{
			name: "retention rule names all three values",
			mutate: func(c *Config) {
				c.Dedupe.Retention = 48 * time.Hour
			},
			key: "dedupe.retention",
			want: []string{
				"dedupe.retention (48h0m0s) must be at least 2 × upstream.max_retry_horizon (72h0m0s) + dedupe.reconciliation_window (24h0m0s) = 168h0m0s",
				"EFFECTIVELY_DEDUPE_RETENTION", "168h0m0s or more",
			},
		},
		{
			name: "retention rule does not overflow",
			mutate: func(c *Config) {
				c.Upstream.MaxRetryHorizon = time.Duration(1<<62 + 1)
				c.Dedupe.Retention = time.Duration(1<<63 - 2)
			},
			key:  "dedupe.retention",
			want: []string{"must be at least"},
		},
		{
			name:   "prune interval below a second",
			mutate: func(c *Config) { c.Dedupe.PruneInterval = 10 * time.Millisecond },
			key:    "dedupe.prune_interval",
			want:   []string{`"10ms"`, "must be between 1s and 24h", "EFFECTIVELY_DEDUPE_PRUNE_INTERVAL"},
		},
		{
			name:   "claims generation longer than the retention",
			mutate: func(c *Config) { c.Dedupe.GenerationInterval = 30 * 24 * time.Hour },
			key:    "dedupe.generation_interval",
			want:   []string{`"720h0m0s"`, "must be between 1s and 336h (dedupe.retention)", "retention / generation_interval older generations", "EFFECTIVELY_DEDUPE_GENERATION_INTERVAL"},
		},
		{
			name:   "drain timeout zero",
			mutate: func(c *Config) { c.Shutdown.DrainTimeout = 0 },
			key:    "shutdown.drain_timeout",
			want:   []string{"must be between 1s and 10m", "grace period", "EFFECTIVELY_SHUTDOWN_DRAIN_TIMEOUT"},
		},
		{
			name:   "revoke must end inside the rebalance timeout",
			mutate: func(c *Config) { c.Consumer.RevokeTimeout = time.Minute },
			key:    "consumer.revoke_timeout",
			want:   []string{`"1m0s"`, "shorter than kafka.rebalance_timeout (1m0s)"},
		},
		{
			name:   "payload above the fetch bound",
			mutate: func(c *Config) { c.Kafka.FetchMaxBytes = 1024; c.Kafka.FetchMaxPartitionBytes = 1024 },
			key:    "consumer.max_payload_bytes",
			want:   []string{`"1048576"`, "must not exceed kafka.fetch_max_bytes (1024)"},
		},
		{
			name:   "partition bytes above fetch bytes",
			mutate: func(c *Config) { c.Kafka.FetchMaxPartitionBytes = c.Kafka.FetchMaxBytes + 1 },
			key:    "kafka.fetch_max_partition_bytes",
			want:   []string{"must not exceed kafka.fetch_max_bytes"},
		},
		{
			name:   "retry max below initial",
			mutate: func(c *Config) { c.Retry.Max = 10 * time.Millisecond },
			key:    "retry.max",
			want:   []string{`"10ms"`, "at least retry.initial (100ms)"},
		},
		{
			name:   "target URL not http",
			mutate: func(c *Config) { c.Targets = map[string]Target{"warehouse": {URL: "ftp://u:pw@warehouse/"}} },
			key:    "targets.warehouse.url",
			want:   []string{`"ftp://u:xxxxx@warehouse/"`, "absolute http or https URL", "EFFECTIVELY_TARGETS_WAREHOUSE_URL"},
		},
		{
			name:   "bad topic name",
			mutate: func(c *Config) { c.Kafka.Topics = []string{"acc ounts"} },
			key:    "kafka.topics",
			want:   []string{`"acc ounts"`, "contains ' '"},
		},
		{
			name:   "duplicate topic",
			mutate: func(c *Config) { c.Kafka.Topics = []string{"orders", "orders"} },
			key:    "kafka.topics",
			want:   []string{"listed twice"},
		},
		{
			name: "natural key strategy without pointers",
			mutate: func(c *Config) {
				c.Topics = []Topic{{Name: "orders", KeyStrategy: KeyStrategyNatural}}
			},
			key:  "topics[0].natural_key",
			want: []string{"(topic orders) key strategy natural needs the pointers", "in the config file, set topics[0].natural_key"},
		},
		{
			name: "topic not in kafka.topics",
			mutate: func(c *Config) {
				c.Topics = []Topic{{Name: "payments"}}
			},
			key:  "topics[0].name",
			want: []string{`"payments"`, "not in kafka.topics", "add it to kafka.topics (env EFFECTIVELY_KAFKA_TOPICS, flag --kafka-topics)"},
		},
		{
			name: "duplicate topic entries",
			mutate: func(c *Config) {
				c.Topics = []Topic{{Name: "orders"}, {Name: "orders", Format: FormatCloudEvents}}
			},
			key:  "topics[1].name",
			want: []string{"already configured by topics[0]"},
		},
		{
			name: "json format cannot key by cloudevents",
			mutate: func(c *Config) {
				c.Topics = []Topic{{Name: "orders", Format: FormatJSON, TypePointer: "/type", SubjectPointer: "/sub"}}
			},
			key:  "topics[0].key_strategy",
			want: []string{`"cloudevents"`, "format json has no CloudEvents source and id", "field (with key_pointer)"},
		},
		{
			name: "json format needs type and subject pointers",
			mutate: func(c *Config) {
				c.Topics = []Topic{{Name: "orders", Format: FormatJSON, KeyStrategy: KeyStrategyContentHash, TypePointer: "/type"}}
			},
			key:  "topics[0].subject_pointer",
			want: []string{"needs a pointer to the resource ID"},
		},
		{
			name: "field strategy needs a pointer",
			mutate: func(c *Config) {
				c.Topics = []Topic{{Name: "orders", KeyStrategy: KeyStrategyField}}
			},
			key:  "topics[0].key_pointer",
			want: []string{"needs key_pointer (or id_pointer)"},
		},
		{
			name: "bad pointer",
			mutate: func(c *Config) {
				c.Topics = []Topic{{Name: "orders", KeyStrategy: KeyStrategyNatural, NaturalKey: []string{"/a", "b~2"}}}
			},
			key:  "topics[0].natural_key",
			want: []string{`"b~2"`, "must start with /"},
		},
		{
			name: "pointer for cloudevents ignored",
			mutate: func(c *Config) {
				c.Topics = []Topic{{Name: "orders", TypePointer: "/type"}}
			},
			key:  "topics[0].type_pointer",
			want: []string{"only used by format json"},
		},
		{
			name: "dlq is a consumed topic",
			mutate: func(c *Config) {
				c.Kafka.Topics = []string{"orders", "payments"}
				c.Topics = []Topic{{Name: "orders", DLQ: "payments", CheckPartitioner: boolp(false)}}
			},
			key:  "topics[0].dlq",
			want: []string{`"payments"`, "is a consumed topic"},
		},
		{
			name:   "default dlq too long",
			mutate: func(c *Config) { c.Kafka.Topics = []string{strings.Repeat("a", 249)} },
			key:    "kafka.topics",
			want:   []string{"default dlq", "Kafka allows at most 249", "add a topics: entry"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := testDefault()
			tt.mutate(&c)
			err := c.Validate()
			fe := requireFieldError(t, err, tt.key, tt.want...)
			require.NotEmpty(t, fe.Problem)
			require.NotEmpty(t, fe.Fix)
			require.NotContains(t, err.Error(), "hunter2")
		})
	}
}

// Validate reports every problem, not just the first.
func TestValidateAll(t *testing.T) {
	t.Parallel()

	c := testDefault()
	c.Kafka.Group = ""
	c.Log.Level = "verbose"
	c.Log.Format = "xml"
	require.Len(t, fieldErrors(t, c.Validate()), 3)
}

func TestValidTopics(t *testing.T) {
	t.Parallel()

	c := testDefault()
	c.Kafka.Topics = []string{"customers", "stripe", "orders", "legacy"}
	c.Topics = []Topic{
		{Name: "stripe", Format: FormatJSON, KeyStrategy: KeyStrategyField, IDPointer: "/id", TypePointer: "/type", SubjectPointer: "/data/object/customer", VersionPointer: "/data/object/version"},
		{Name: "orders", Format: FormatJSON, KeyStrategy: KeyStrategyNatural, NaturalKey: []string{"/order_id", "/line~1no"}, TypePointer: "/kind", SubjectPointer: "/order_id", DLQ: "orders-dead"},
		{Name: "legacy", KeyStrategy: KeyStrategyContentHash},
	}
	require.NoError(t, c.Validate())
}
