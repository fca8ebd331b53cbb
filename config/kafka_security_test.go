package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateKafkaSecurity(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	file := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(file, []byte("s3cret\n"), 0o600))
	missing := filepath.Join(dir, "missing.pem")

	tests := []struct {
		name   string
		mutate func(k *Kafka)
		key    string
		want   []string // substrings of the message
	}{
		{"tls file without tls", func(k *Kafka) { k.TLS.CAFile = file }, "kafka.tls.ca_file",
			[]string{"kafka.tls.enabled is false", "EFFECTIVELY_KAFKA_TLS_ENABLED"}},
		{"ca file missing", func(k *Kafka) { k.TLS.Enabled, k.TLS.CAFile = true, missing }, "kafka.tls.ca_file",
			[]string{"cannot be read", "no such file", "EFFECTIVELY_KAFKA_TLS_CA_FILE"}},
		{"ca file is a directory", func(k *Kafka) { k.TLS.Enabled, k.TLS.CAFile = true, dir }, "kafka.tls.ca_file",
			[]string{"is a directory"}},
		{"cert without key", func(k *Kafka) { k.TLS.Enabled, k.TLS.CertFile = true, file }, "kafka.tls.key_file",
			[]string{"must be set with kafka.tls.cert_file", "EFFECTIVELY_KAFKA_TLS_KEY_FILE"}},
		{"key without cert", func(k *Kafka) { k.TLS.Enabled, k.TLS.KeyFile = true, file }, "kafka.tls.cert_file",
			[]string{"must be set with kafka.tls.key_file"}},
		{"unknown mechanism", func(k *Kafka) { k.SASL.Mechanism = "gssapi" }, "kafka.sasl.mechanism",
			[]string{"must be one of none, plain, scram-sha-256, scram-sha-512, oauthbearer", "in any case", "EFFECTIVELY_KAFKA_SASL_MECHANISM"}},
		{"kerberos", func(k *Kafka) { k.SASL.Mechanism = "GSSAPI" }, "kafka.sasl.mechanism",
			[]string{`kafka.sasl.mechanism = "GSSAPI"`, "GSSAPI (Kerberos) is not supported"}},
		{"a near miss is not guessed", func(k *Kafka) { k.SASL.Mechanism = "SCRAM-SHA-1" }, "kafka.sasl.mechanism",
			[]string{`"SCRAM-SHA-1"`, "must be one of"}},
		{"scram without username", func(k *Kafka) { k.SASL.Mechanism, k.SASL.Password = SASLMechanismScramSHA512, "pw" }, "kafka.sasl.username",
			[]string{"must not be empty", "EFFECTIVELY_KAFKA_SASL_USERNAME"}},
		{"scram without password", func(k *Kafka) { k.SASL.Mechanism, k.SASL.Username = SASLMechanismScramSHA256, "u" }, "kafka.sasl.password_file",
			[]string{"needs a password", "EFFECTIVELY_KAFKA_SASL_PASSWORD_FILE", "EFFECTIVELY_KAFKA_SASL_PASSWORD)"}},
		{"password and password file", func(k *Kafka) {
			k.SASL.Mechanism, k.SASL.Username, k.SASL.Password, k.SASL.PasswordFile = SASLMechanismPlain, "u", "pw", file
		}, "kafka.sasl.password_file", []string{"only one may be"}},
		{"password file missing", func(k *Kafka) {
			k.SASL.Mechanism, k.SASL.Username, k.SASL.PasswordFile = SASLMechanismPlain, "u", missing
		}, "kafka.sasl.password_file", []string{"cannot be read"}},
		{"password without mechanism", func(k *Kafka) { k.SASL.Password = "hunter2" }, "kafka.sasl.password",
			[]string{`kafka.sasl.password = "xxxxx"`, "only used by kafka.sasl.mechanism plain"}},
		{"oauthbearer without token file", func(k *Kafka) { k.SASL.Mechanism = SASLMechanismOAuthBearer }, "kafka.sasl.token_file",
			[]string{"needs a token file", "EFFECTIVELY_KAFKA_SASL_TOKEN_FILE"}},
		{"oauthbearer with a password", func(k *Kafka) {
			k.SASL.Mechanism, k.SASL.TokenFile, k.SASL.Password = SASLMechanismOAuthBearer, file, "hunter2"
		}, "kafka.sasl.password", []string{"only used by"}},
		{"token file with scram", func(k *Kafka) {
			k.SASL.Mechanism, k.SASL.Username, k.SASL.Password, k.SASL.TokenFile = SASLMechanismScramSHA256, "u", "pw", file
		}, "kafka.sasl.token_file", []string{"only used by kafka.sasl.mechanism oauthbearer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := testDefault()
			tt.mutate(&c.Kafka)
			fes := c.validate()
			require.Len(t, fes, 1, "%v", fes)
			require.Equal(t, tt.key, fes[0].Key)
			msg := fes[0].Error()
			for _, w := range tt.want {
				require.Contains(t, msg, w)
			}
			require.NotContains(t, msg, "hunter2")
		})
	}
}

func TestValidKafkaSecurity(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	for _, k := range []Kafka{
		{TLS: KafkaTLS{Enabled: true}, SASL: KafkaSASL{Mechanism: SASLMechanismNone}},
		{TLS: KafkaTLS{Enabled: true, CAFile: file, CertFile: file, KeyFile: file, ServerName: "kafka"}, SASL: KafkaSASL{Mechanism: SASLMechanismNone}},
		{SASL: KafkaSASL{Mechanism: SASLMechanismPlain, Username: "u", Password: "p"}},
		{SASL: KafkaSASL{Mechanism: SASLMechanismScramSHA256, Username: "u", PasswordFile: file}},
		{SASL: KafkaSASL{Mechanism: SASLMechanismScramSHA512, Username: "u", Password: "p"}},
		{SASL: KafkaSASL{Mechanism: SASLMechanismOAuthBearer, TokenFile: file}},
	} {
		c := testDefault()
		c.Kafka.TLS, c.Kafka.SASL = k.TLS, k.SASL
		require.NoError(t, c.Validate(), "%+v", k)
	}
}

func TestSASLPasswordRedacted(t *testing.T) {
	t.Parallel()

	c := testDefault()
	c.Kafka.SASL = KafkaSASL{Mechanism: SASLMechanismScramSHA512, Username: "worker", Password: "hunter2-secret"}
	r := c.Redacted()
	require.Equal(t, "xxxxx", r.Kafka.SASL.Password)
	require.Equal(t, "worker", r.Kafka.SASL.Username)
	require.Equal(t, "hunter2-secret", c.Kafka.SASL.Password, "the original is unchanged")
	out, err := c.Dump()
	require.NoError(t, err)
	require.NotContains(t, string(out), "hunter2")
	require.Contains(t, string(out), "password: xxxxx")
	require.Contains(t, string(out), "mechanism: scram-sha-512")
	// An empty password stays empty: "xxxxx" would read as a set password.
	require.Empty(t, testDefault().Redacted().Kafka.SASL.Password)
}

func TestLoadKafkaSecurityFromEnv(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(ca, []byte("x"), 0o600))
	t.Setenv("EFFECTIVELY_KAFKA_TLS_ENABLED", "true")
	t.Setenv("EFFECTIVELY_KAFKA_TLS_CA_FILE", ca)
	t.Setenv("EFFECTIVELY_KAFKA_TLS_SERVER_NAME", "kafka.example.com")
	t.Setenv("EFFECTIVELY_KAFKA_SASL_MECHANISM", "scram-sha-256")
	t.Setenv("EFFECTIVELY_KAFKA_SASL_USERNAME", "worker")
	t.Setenv("EFFECTIVELY_KAFKA_SASL_PASSWORD", "from-env")
	c, err := Load("", nil, testExt)
	require.NoError(t, err)
	require.Equal(t, KafkaTLS{Enabled: true, CAFile: ca, ServerName: "kafka.example.com"}, c.Kafka.TLS)
	require.Equal(t, KafkaSASL{Mechanism: "scram-sha-256", Username: "worker", Password: "from-env"}, c.Kafka.SASL)

	// A bad value of a secret key never appears in the error.
	t.Setenv("EFFECTIVELY_KAFKA_SASL_MECHANISM", "none")
	_, err = Load("", nil, testExt)
	require.Error(t, err)
	require.False(t, strings.Contains(err.Error(), "from-env"), err.Error())
	require.Contains(t, err.Error(), "kafka.sasl.password")
}

// Kafka spells the mechanisms in capitals (SCRAM-SHA-512 in a Java client's
// sasl.mechanism and a broker's sasl.enabled.mechanisms); every spelling of a
// supported mechanism loads as its one constant, from the file, the
// environment and a hand-built Config alike.
func TestSASLMechanismSpellings(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	require.NoError(t, os.WriteFile(pw, []byte("s3cret\n"), 0o600))
	tests := []struct{ in, want string }{
		{"SCRAM-SHA-512", SASLMechanismScramSHA512},
		{"scram-sha-512", SASLMechanismScramSHA512},
		{"Scram-Sha-256", SASLMechanismScramSHA256},
		{"SCRAM_SHA_256", SASLMechanismScramSHA256},
		{" PLAIN ", SASLMechanismPlain},
		{"plain", SASLMechanismPlain},
		{"OAUTHBEARER", SASLMechanismOAuthBearer},
		{"OAuthBearer", SASLMechanismOAuthBearer},
		{"NONE", SASLMechanismNone},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, NormalizeSASLMechanism(tt.in), tt.in)

		sasl := "username: worker\n    password_file: " + pw
		if tt.want == SASLMechanismOAuthBearer {
			sasl = "token_file: " + pw
		}
		if tt.want == SASLMechanismNone {
			sasl = ""
		}
		file := writeConfig(t, "kafka:\n  tls: {enabled: true}\n  sasl:\n    mechanism: \""+tt.in+"\"\n    "+sasl+"\n")
		c, err := Load(file, nil, testExt)
		require.NoError(t, err, "file: %q", tt.in)
		require.Equal(t, tt.want, c.Kafka.SASL.Mechanism, "file: %q", tt.in)

		hand := testDefault()
		hand.Kafka.TLS.Enabled = true
		hand.Kafka.SASL = KafkaSASL{Mechanism: tt.in, Username: "worker", PasswordFile: pw}
		if tt.want == SASLMechanismOAuthBearer {
			hand.Kafka.SASL = KafkaSASL{Mechanism: tt.in, TokenFile: pw}
		}
		if tt.want == SASLMechanismNone {
			hand.Kafka.SASL = KafkaSASL{Mechanism: tt.in}
		}
		require.NoError(t, hand.Validate(), "hand-built: %q", tt.in)
	}

	t.Setenv("EFFECTIVELY_KAFKA_TLS_ENABLED", "true")
	t.Setenv("EFFECTIVELY_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
	t.Setenv("EFFECTIVELY_KAFKA_SASL_USERNAME", "worker")
	t.Setenv("EFFECTIVELY_KAFKA_SASL_PASSWORD_FILE", pw)
	c, err := Load("", nil, testExt)
	require.NoError(t, err)
	require.Equal(t, SASLMechanismScramSHA512, c.Kafka.SASL.Mechanism)
}
