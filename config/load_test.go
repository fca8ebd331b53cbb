package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// writeConfig writes a config file into a fresh temp dir and returns its path.
func writeConfig(t testing.TB, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "effectively.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// flagSet returns a flag set with BindFlags applied, parsed from args.
func flagSet(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	BindFlags(fs)
	require.NoError(t, fs.Parse(args))
	return fs
}

// fieldErrors unpacks the *FieldError values of a Load or Validate error.
func fieldErrors(t *testing.T, err error) []*FieldError {
	t.Helper()
	require.Error(t, err)
	joined, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok, "want errors.Join of *FieldError, got %T: %v", err, err)
	var out []*FieldError
	for _, e := range joined.Unwrap() {
		var fe *FieldError
		require.True(t, errors.As(e, &fe), "not a *FieldError: %v", e)
		out = append(out, fe)
	}
	return out
}

// requireFieldError asserts that err holds a FieldError on key and that its
// message contains every one of want.
func requireFieldError(t *testing.T, err error, key string, want ...string) *FieldError {
	t.Helper()
	for _, fe := range fieldErrors(t, err) {
		if fe.Key != key {
			continue
		}
		for _, w := range want {
			require.Contains(t, fe.Error(), w)
		}
		return fe
	}
	require.Failf(t, "no FieldError on key", "key %s not in: %v", key, err)
	return nil
}

func TestLoadDefaults(t *testing.T) {
	t.Parallel()

	c, err := Load("", nil, testExt)
	require.NoError(t, err)
	require.Equal(t, testDefault(), c)

	c, err = Load(writeConfig(t, "# nothing set\n"), flagSet(t), testExt)
	require.NoError(t, err)
	require.Equal(t, testDefault(), c)
}

// The precedence tests set the environment, so they cannot run in parallel.
func TestLoadPrecedence(t *testing.T) {
	file := writeConfig(t, "kafka:\n  group: from-file\n")

	tests := []struct {
		name string
		file string
		env  string
		args []string
		want string
	}{
		{name: "default", want: "effectively"},
		{name: "file over default", file: file, want: "from-file"},
		{name: "env over file", file: file, env: "from-env", want: "from-env"},
		{name: "flag over env", file: file, env: "from-env", args: []string{"--kafka-group", "from-flag"}, want: "from-flag"},
		{name: "flag over file", file: file, args: []string{"--kafka-group=from-flag"}, want: "from-flag"},
		{name: "unchanged flag does not override env", env: "from-env", args: []string{"--log-level", "debug"}, want: "from-env"},
		{name: "unchanged flag does not override file", file: file, args: []string{}, want: "from-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("EFFECTIVELY_KAFKA_GROUP", tt.env)
			}
			c, err := Load(tt.file, flagSet(t, tt.args...), testExt)
			require.NoError(t, err)
			require.Equal(t, tt.want, c.Kafka.Group)
		})
	}
}

// An unchanged flag with a non-default value on the flag set (a caller that
// changed DefValue) must still lose against the file.
func TestLoadUnchangedFlagLosesToFile(t *testing.T) {
	t.Parallel()

	fs := flagSet(t)
	require.NoError(t, fs.Lookup("log-level").Value.Set("error"))
	fs.Lookup("log-level").Changed = false
	c, err := Load(writeConfig(t, "log:\n  level: warn\n"), fs, testExt)
	require.NoError(t, err)
	require.Equal(t, "warn", c.Log.Level)
}

func TestLoadEnv(t *testing.T) {
	t.Setenv("EFFECTIVELY_KAFKA_BROKERS", "a:1, b:2,")
	t.Setenv("EFFECTIVELY_KAFKA_TOPICS", "orders,payments")
	t.Setenv("EFFECTIVELY_KAFKA_SESSION_TIMEOUT", "30s")
	t.Setenv("EFFECTIVELY_POSTGRES_MAX_CONNS", "12")
	t.Setenv("EFFECTIVELY_CONSUMER_CHECK_PARTITIONER", "false")
	t.Setenv("EFFECTIVELY_DEDUPE_RETENTION", "720h")
	t.Setenv("EFFECTIVELY_TARGETS_CATALOG_URL", "https://catalog.example.com/v1")
	t.Setenv("EFFECTIVELY_HTTP_ADDR", "") // empty disables the server

	c, err := Load("", nil, Extension{Defaults: testExt.Defaults, Targets: []string{"catalog"}})
	require.NoError(t, err)
	require.Equal(t, []string{"a:1", "b:2"}, c.Kafka.Brokers)
	require.Equal(t, []string{"orders", "payments"}, c.Kafka.Topics)
	require.Equal(t, 30*time.Second, c.Kafka.SessionTimeout)
	require.Equal(t, int32(12), c.Postgres.MaxConns)
	require.False(t, c.Consumer.CheckPartitioner)
	require.Equal(t, 720*time.Hour, c.Dedupe.Retention)
	require.Equal(t, "https://catalog.example.com/v1", c.Targets["catalog"].URL)
	require.Empty(t, c.HTTP.Addr)
}

func TestEnvName(t *testing.T) {
	t.Parallel()

	require.Equal(t, "EFFECTIVELY_KAFKA_BROKERS", EnvName("kafka.brokers"))
	require.Equal(t, "EFFECTIVELY_TARGETS_WAREHOUSE_URL", EnvName("targets.warehouse.url"))
	require.Equal(t, "kafka-instance-id", FlagName("kafka.instance_id"))
}

func TestLoadFlags(t *testing.T) {
	t.Parallel()

	fs := flagSet(t,
		"--kafka-brokers", "a:1,b:2",
		"--kafka-topics=orders", "--kafka-topics=payments",
		"--kafka-instance-id", "pod-0",
		"--kafka-group-protocol", "consumer",
		"--kafka-start-offset", "latest",
		"--postgres-url", "postgres://u@db:5432/x",
		"--http-addr", ":0",
		"--log-level", "debug",
		"--log-format", "console",
		"--consumer-batch-max-records", "7",
		"--consumer-batch-linger", "20ms",
	)
	c, err := Load("", fs, testExt)
	require.NoError(t, err)
	require.Equal(t, []string{"a:1", "b:2"}, c.Kafka.Brokers)
	require.Equal(t, []string{"orders", "payments"}, c.Kafka.Topics)
	require.Equal(t, "pod-0", c.Kafka.InstanceID)
	require.Equal(t, GroupProtocolConsumer, c.Kafka.GroupProtocol)
	require.Equal(t, StartOffsetLatest, c.Kafka.StartOffset)
	require.Equal(t, "postgres://u@db:5432/x", c.Postgres.URL)
	require.Equal(t, ":0", c.HTTP.Addr)
	require.Equal(t, "debug", c.Log.Level)
	require.Equal(t, "console", c.Log.Format)
	require.Equal(t, 7, c.Consumer.BatchMaxRecords)
	require.Equal(t, 20*time.Millisecond, c.Consumer.BatchLinger)
}

func TestBindFlags(t *testing.T) {
	t.Parallel()

	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	BindFlags(fs)
	BindFlags(fs) // idempotent: a second call must not panic on redefinition
	for _, f := range flags {
		pf := fs.Lookup(FlagName(f.key))
		require.NotNil(t, pf, f.key)
		require.Contains(t, pf.Usage, EnvName(f.key))
	}
	require.Equal(t, "[127.0.0.1:19092]", fs.Lookup("kafka-brokers").DefValue)
	require.Equal(t, "effectively", fs.Lookup("kafka-group").DefValue)
	require.Equal(t, "5ms", fs.Lookup("consumer-batch-linger").DefValue)
	require.Equal(t, "500", fs.Lookup("consumer-batch-max-records").DefValue)
	require.Equal(t, "false", fs.Lookup("outbox-resend-expired").DefValue)
	require.Len(t, flags, 13)
}

func TestLoadFile(t *testing.T) {
	t.Parallel()

	path := writeConfig(t, `
Kafka:                       # keys are case-insensitive
  Brokers: [k1:9092, "k2:9092"]
  topics: [orders, stripe]
  session_timeout: 30s
  fetch_max_bytes: 1048576
consumer:
  max_payload_bytes: 524288
  batch_linger: 0            # a bare 0 is fine for a duration
postgres:
  url: host=db user=effectively password=secret dbname=effectively
http:                        # a section with everything commented out
  # addr: ":9410"
topics:
  - name: stripe
    format: json
    key_strategy: field
    id_pointer: /id
    type_pointer: /type
    subject_pointer: /data/object/customer
    check_partitioner: false
`)
	c, err := Load(path, nil, testExt)
	require.NoError(t, err)
	require.Equal(t, []string{"k1:9092", "k2:9092"}, c.Kafka.Brokers)
	require.Equal(t, 30*time.Second, c.Kafka.SessionTimeout)
	require.Equal(t, int32(1<<20), c.Kafka.FetchMaxBytes)
	require.Equal(t, time.Duration(0), c.Consumer.BatchLinger)
	require.Equal(t, testDefault().HTTP.Addr, c.HTTP.Addr)
	require.Len(t, c.Topics, 1)

	st := c.TopicSettings("stripe")
	require.Equal(t, FormatJSON, st.Format)
	require.Equal(t, "/id", st.KeyPointer)
	require.Equal(t, "stripe.dlq", st.DLQ)
	require.False(t, *st.CheckPartitioner)
	require.True(t, *c.TopicSettings("orders").CheckPartitioner)
}

func TestLoadFileErrors(t *testing.T) {
	t.Parallel()

	t.Run("no such file", func(t *testing.T) {
		t.Parallel()
		_, err := Load("/x/y.yaml", nil, testExt)
		require.EqualError(t, err, "config file /x/y.yaml: no such file; fix: pass an existing file to --config or omit it")
	})
	t.Run("bad YAML", func(t *testing.T) {
		t.Parallel()
		path := writeConfig(t, "kafka:\n  brokers: [a:1\n")
		_, err := Load(path, nil, testExt)
		require.ErrorContains(t, err, "config file "+path+": invalid YAML: yaml: line")
	})
	t.Run("not a mapping", func(t *testing.T) {
		t.Parallel()
		path := writeConfig(t, "- kafka\n")
		_, err := Load(path, nil, testExt)
		require.ErrorContains(t, err, "config file "+path+": the document is a list")
	})
	t.Run("duplicate key by case", func(t *testing.T) {
		t.Parallel()
		path := writeConfig(t, "log:\n  level: info\n  Level: warn\n")
		_, err := Load(path, nil, testExt)
		require.ErrorContains(t, err, "key log.level appears twice")
	})
}

func TestLoadUnknownKeys(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		yaml string
		key  string
		want []string
	}{
		{"typo", "kafka:\n  broker: [a:1]\n", "kafka.broker", []string{"unknown key", "did you mean kafka.brokers?"}},
		{"top-level typo", "kafak:\n  group: g\n", "kafak", []string{`kafak = "{group: g}"`, "unknown key", "did you mean kafka?"}},
		{"wrong section", "consumer:\n  session_timeout: 10s\n", "consumer.session_timeout", []string{"did you mean kafka.session_timeout?"}},
		{"no suggestion", "frobnicate: 1\n", "frobnicate", []string{"unknown key", "fix: remove it"}},
		{"section as value", "kafka: 5\n", "kafka", []string{"is a section", "kafka: {brokers:"}},
		{"topic field typo", "topics:\n  - name: orders\n    fromat: json\n", "topics[0].fromat", []string{"unknown topic setting", "did you mean topics[0].format?"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(writeConfig(t, tt.yaml), nil, testExt)
			requireFieldError(t, err, tt.key, tt.want...)
		})
	}
}

func TestLoadBadValues(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		yaml string
		key  string
		want []string
	}{
		{
			name: "bad duration from env",
			env:  map[string]string{"EFFECTIVELY_CONSUMER_BATCH_LINGER": "abc"},
			key:  "consumer.batch_linger",
			want: []string{`"abc"`, "from env EFFECTIVELY_CONSUMER_BATCH_LINGER", "Go duration", "fix: set consumer.batch_linger (env EFFECTIVELY_CONSUMER_BATCH_LINGER, flag --consumer-batch-linger) to e.g. 5ms"},
		},
		{
			name: "bare number for a duration in the file",
			yaml: "kafka:\n  session_timeout: 45\n",
			key:  "kafka.session_timeout",
			want: []string{`"45"`, "bare number", "from config file", "to e.g. 45s"},
		},
		{
			name: "bad int from env",
			env:  map[string]string{"EFFECTIVELY_CONSUMER_BATCH_MAX_RECORDS": "lots"},
			key:  "consumer.batch_max_records",
			want: []string{`"lots"`, "not a whole number", "to e.g. 500"},
		},
		{
			name: "int32 overflow",
			env:  map[string]string{"EFFECTIVELY_KAFKA_FETCH_MAX_BYTES": "4294967296"},
			key:  "kafka.fetch_max_bytes",
			want: []string{`"4294967296"`, "out of range", "2147483647", "EFFECTIVELY_KAFKA_FETCH_MAX_BYTES"},
		},
		{
			name: "fraction for an int",
			yaml: "parking:\n  max_attempts: 2.5\n",
			key:  "parking.max_attempts",
			want: []string{`"2.5"`, "not a whole number"},
		},
		{
			name: "bad bool",
			env:  map[string]string{"EFFECTIVELY_CONSUMER_CHECK_PARTITIONER": "maybe"},
			key:  "consumer.check_partitioner",
			want: []string{`"maybe"`, "true or false"},
		},
		{
			name: "list for a string",
			yaml: "kafka:\n  group: [a, b]\n",
			key:  "kafka.group",
			want: []string{"is a list", "to e.g. effectively"},
		},
		{
			name: "topics not a list",
			yaml: "topics:\n  name: orders\n",
			key:  "topics",
			want: []string{"expected a list of topic settings"},
		},
		{
			name: "topic field of the wrong type",
			yaml: "topics:\n  - name: orders\n    natural_key: {a: 1}\n",
			key:  "topics[0].natural_key",
			want: []string{"expected a list of strings"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			path := ""
			if tt.yaml != "" {
				path = writeConfig(t, tt.yaml)
			}
			_, err := Load(path, nil, testExt)
			requireFieldError(t, err, tt.key, tt.want...)
		})
	}
}

// Load reports parse errors and rule violations together, but no rule
// violation that only stems from a key that failed to parse.
func TestLoadReportsEverything(t *testing.T) {
	t.Setenv("EFFECTIVELY_CONSUMER_BATCH_LINGER", "abc")
	t.Setenv("EFFECTIVELY_LOG_LEVEL", "verbose")
	t.Setenv("EFFECTIVELY_KAFKA_REBALANCE_TIMEOUT", "oops")

	_, err := Load(writeConfig(t, "kafka:\n  broker: x\n"), nil, testExt)
	keys := map[string]bool{}
	for _, fe := range fieldErrors(t, err) {
		keys[fe.Key] = true
	}
	require.Equal(t, map[string]bool{
		"consumer.batch_linger":   true,
		"log.level":               true,
		"kafka.rebalance_timeout": true,
		"kafka.broker":            true,
	}, keys)
}

func TestLoadRedactsErrors(t *testing.T) {
	t.Setenv("EFFECTIVELY_POSTGRES_URL", "mysql://root:hunter2@db/x")
	_, err := Load("", nil, testExt)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")
	require.Contains(t, err.Error(), "mysql://root:xxxxx@db/x")
}

func TestLevenshtein(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"kafka", "", 5}, {"kafka.broker", "kafka.brokers", 1}, {"kitten", "sitting", 3},
	} {
		require.Equal(t, tt.want, levenshtein(tt.a, tt.b), "%q %q", tt.a, tt.b)
	}
}

func FuzzLoadYAML(f *testing.F) {
	seeds := []string{
		"",
		"kafka:\n  brokers: [a:1, b:2]\n  group: g\n",
		"kafka:\n  brokers: [a:1\n",
		"kafka: 5\n",
		"- a\n- b\n",
		"topics:\n  - name: orders\n    format: json\n    key_strategy: natural\n    natural_key: [/a, /b]\n",
		"topics: [{name: x, fromat: json}, 7, null]\n",
		"dedupe:\n  retention: 2562047h\nupstream:\n  max_retry_horizon: 2562047h\n",
		"consumer: {batch_linger: 1e99, batch_max_records: -1e400}\n",
		"? [a, b]\n: c\n1: 2\n",
		"postgres: {url: 'postgres://u:p@%zz/x'}\n",
		"\"kafka.brokers\": [a:1]\nkafka: {group: ~}\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := os.CreateTemp(dir, "fuzz-*.yaml")
		require.NoError(t, err)
		path := file.Name()
		defer os.Remove(path)
		_, err = file.Write(data)
		require.NoError(t, err)
		require.NoError(t, file.Close())
		c, err := Load(path, nil, testExt)
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if verr := c.Validate(); verr != nil {
			t.Fatalf("Load returned a config that does not validate: %v", verr)
		}
		if _, err := c.Dump(); err != nil {
			t.Fatalf("Dump: %v", err)
		}
	})
}

// A build's default topic settings and sinks stand unless the file lists
// its own, which replace them.
func TestBuildDefaultTopicsAndSinks(t *testing.T) {
	ext := Extension{Defaults: func(c *Config) {
		c.Kafka.Topics = []string{"src.public.customers"}
		c.Topics = []Topic{{Name: "src.public.customers", Format: FormatDebezium}}
	}}
	c, err := Load("", nil, ext)
	require.NoError(t, err)
	require.Equal(t, FormatDebezium, c.TopicSettings("src.public.customers").Format)
	require.Equal(t, KeyStrategyPosition, c.TopicSettings("src.public.customers").KeyStrategy)

	c, err = Load(writeConfig(t, "topics:\n  - {name: src.public.customers, format: json, key_strategy: content-hash, type_pointer: /t, subject_pointer: /s}\n"), nil, ext)
	require.NoError(t, err)
	require.Equal(t, FormatJSON, c.TopicSettings("src.public.customers").Format, "the file's entry wins over the build's of the same name")
	require.Len(t, c.Topics, 1)

	// A file's entries for other topics stand beside the build's.
	c, err = Load(writeConfig(t, "kafka:\n  topics: [src.public.customers, orders]\ntopics:\n  - {name: orders}\n"), nil, ext)
	require.NoError(t, err)
	require.Equal(t, FormatDebezium, c.TopicSettings("src.public.customers").Format)

	// The topic renamed from the environment: refused, naming both, rather
	// than read as CloudEvents.
	t.Setenv("EFFECTIVELY_KAFKA_TOPICS", "prod.public.customers")
	_, err = Load("", nil, ext)
	require.ErrorContains(t, err, "prod.public.customers")
	require.ErrorContains(t, err, "default settings are for topic src.public.customers (format debezium)")

	// A deployment consuming a subset of the build's topics.
	two := Extension{Defaults: func(c *Config) {
		c.Kafka.Topics = []string{"a", "b"}
		c.Topics = []Topic{{Name: "a", Format: FormatDebezium}, {Name: "b", Format: FormatDebezium}}
	}}
	t.Setenv("EFFECTIVELY_KAFKA_TOPICS", "a")
	c, err = Load("", nil, two)
	require.NoError(t, err)
	require.Equal(t, []Topic{{Name: "a", Format: FormatDebezium}}, c.Topics)
}

func TestDebeziumTopicRefusesRequireSubject(t *testing.T) {
	_, err := Load(writeConfig(t, "kafka:\n  topics: [src]\ntopics:\n  - {name: src, format: debezium, require_subject: true}\n"), nil)
	require.ErrorContains(t, err, "require_subject")
}
