package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// testExt is a build that consumes the topic orders by default: the engine
// itself names no topic.
var testExt = Extension{Defaults: func(c *Config) { c.Kafka.Topics = []string{"orders"} }}

// testDefault is the defaults of that build.
func testDefault() Config { return DefaultsOf(testExt) }

func TestRedacted(t *testing.T) {
	t.Parallel()

	tests := []struct{ in, want string }{
		{"postgres://effectively:s3cret@db:5432/effectively?sslmode=disable", "postgres://effectively:xxxxx@db:5432/effectively?sslmode=disable"},
		{"postgres://effectively@db/x", "postgres://effectively@db/x"},
		{"postgres://u@db/x?password=s3cret&sslmode=require", "postgres://u@db/x?password=xxxxx&sslmode=require"},
		{"host=db user=u password=s3cret dbname=x", "host=db user=u password=xxxxx dbname=x"},
		{"host=db user=u sslpassword=s3cret sslkey=/k.pem dbname=x", "host=db user=u sslpassword=xxxxx sslkey=/k.pem dbname=x"},
		{"postgres://u@db/x?sslpassword=s3cret&sslkey=%2Fk.pem", "postgres://u@db/x?sslpassword=xxxxx&sslkey=%2Fk.pem"}, // the order kept
		{"https://api.example/v1?api_key=s3cret&page=2", "https://api.example/v1?api_key=xxxxx&page=2"},
		{"https://api.example/v1?access_token=s3cret", "https://api.example/v1?access_token=xxxxx"},
		{"https://hooks.example/x?sig=s3cret&apikey=s3cret&key=s3cret", "https://hooks.example/x?sig=xxxxx&apikey=xxxxx&key=xxxxx"},
		{"https://api.example/v1?client_secret=s3cret", "https://api.example/v1?client_secret=xxxxx"},
		{"host=db password='s3 cret' dbname=x", "host=db password=xxxxx dbname=x"},
		{"postgres://u:s3cret@db:5432%zz/x", "postgres://u:xxxxx@db:5432%zz/x"}, // does not parse
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, redactURL(tt.in))
		})
	}

	c := testDefault()
	c.Postgres.URL = "postgres://effectively:s3cret@db/effectively"
	c.Targets = map[string]Target{"warehouse": {URL: "https://api:s3cret@warehouse.example.com/"}, "catalog": {URL: "https://catalog.example.com/"}}
	r := c.Redacted()
	require.Equal(t, "postgres://effectively:xxxxx@db/effectively", r.Postgres.URL)
	require.Equal(t, "https://api:xxxxx@warehouse.example.com/", r.Targets["warehouse"].URL)
	require.Equal(t, "https://catalog.example.com/", r.Targets["catalog"].URL)
	require.Equal(t, "https://api:s3cret@warehouse.example.com/", c.Targets["warehouse"].URL, "the original's targets are unchanged")
	require.Equal(t, "postgres://effectively:s3cret@db/effectively", c.Postgres.URL, "the original is unchanged")
}

func TestDump(t *testing.T) {
	t.Parallel()

	c := testDefault()
	c.Postgres.URL = "postgres://effectively:s3cret@db:5432/effectively"
	c.Kafka.Topics = []string{"orders", "stripe"}
	no := false
	c.Topics = []Topic{{Name: "stripe", Format: FormatJSON, KeyStrategy: KeyStrategyField, IDPointer: "/id", TypePointer: "/type", SubjectPointer: "/customer", CheckPartitioner: &no}}
	require.NoError(t, c.Validate())

	out, err := c.Redacted().Dump()
	require.NoError(t, err)
	require.NotContains(t, string(out), "s3cret")
	require.Contains(t, string(out), "effectively:xxxxx@db")
	require.Contains(t, string(out), "session_timeout: 45s")
	require.Contains(t, string(out), "instance_id: \"\"")
	require.Contains(t, string(out), "retention: 336h")

	again, err := c.Dump() // Dump redacts on its own, too
	require.NoError(t, err)
	require.Equal(t, out, again)

	// The dump reads back as the same configuration (except the password).
	path := filepath.Join(t.TempDir(), "dump.yaml")
	require.NoError(t, os.WriteFile(path, out, 0o600))
	loaded, err := Load(path, nil, testExt)
	require.NoError(t, err, "%s", out)
	require.Equal(t, c.Redacted(), loaded)
}

func TestTopicSettings(t *testing.T) {
	t.Parallel()

	c := testDefault()
	st := c.TopicSettings("orders")
	require.Equal(t, "orders", st.Name)
	require.Equal(t, FormatCloudEvents, st.Format)
	require.Equal(t, KeyStrategyCloudEvents, st.KeyStrategy)
	require.Equal(t, "orders.dlq", st.DLQ)
	require.NotNil(t, st.CheckPartitioner)
	require.True(t, *st.CheckPartitioner)

	yes := true
	c.Consumer.CheckPartitioner = false
	c.Topics = []Topic{
		{Name: "a", KeyStrategy: KeyStrategyField, IDPointer: "/id", DLQ: "dead"},
		{Name: "b", KeyStrategy: KeyStrategyField, IDPointer: "/id", KeyPointer: "/key", CheckPartitioner: &yes},
	}
	a := c.TopicSettings("a")
	require.Equal(t, "/id", a.KeyPointer)
	require.Equal(t, "dead", a.DLQ)
	require.False(t, *a.CheckPartitioner)
	b := c.TopicSettings("b")
	require.Equal(t, "/key", b.KeyPointer)
	require.True(t, *b.CheckPartitioner)
	*b.CheckPartitioner = false
	require.True(t, *c.Topics[1].CheckPartitioner, "the result does not alias the config")
}

// The password can come from a file (a mounted secret): it reaches
// postgres.url, and stays out of the printed configuration.
func TestPostgresPasswordFile(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	require.NoError(t, os.WriteFile(pw, []byte("s3cr'et\n"), 0o600))
	t.Setenv("EFFECTIVELY_POSTGRES_PASSWORD_FILE", pw)

	t.Setenv("EFFECTIVELY_POSTGRES_URL", "postgres://app@db:5432/x?sslmode=verify-full")
	c, err := Load("", nil, testExt)
	require.NoError(t, err)
	require.Equal(t, "postgres://app:s3cr%27et@db:5432/x?sslmode=verify-full", c.Postgres.URL)
	out, err := c.Dump()
	require.NoError(t, err)
	require.NotContains(t, string(out), "s3cr")

	t.Setenv("EFFECTIVELY_POSTGRES_URL", "host=db user=app dbname=x")
	c, err = Load("", nil, testExt)
	require.NoError(t, err)
	require.Equal(t, `host=db user=app dbname=x password='s3cr\'et'`, c.Postgres.URL)

	t.Setenv("EFFECTIVELY_POSTGRES_URL", "postgres://app:other@db/x")
	_, err = Load("", nil, testExt)
	require.ErrorContains(t, err, "postgres.url carries a password too")

	t.Setenv("EFFECTIVELY_POSTGRES_URL", "postgres://app@db/x")
	t.Setenv("EFFECTIVELY_POSTGRES_PASSWORD_FILE", filepath.Join(dir, "missing"))
	_, err = Load("", nil, testExt)
	require.ErrorContains(t, err, "postgres.password_file")
	require.ErrorContains(t, err, "cannot be read")
}
