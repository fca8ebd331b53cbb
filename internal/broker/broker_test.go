package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/effectively-io/effectively/config"
)

func TestSecretFileIsReadAtEveryAuthentication(t *testing.T) {
	t.Parallel()

	core, logs := observer.New(zap.InfoLevel)
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte("first-token\n"), 0o600))
	f := &secretFile{key: "kafka.sasl.token_file", path: path, log: zap.New(core)}
	s, err := f.read()
	require.NoError(t, err)
	require.Equal(t, "first-token", s)
	require.NoError(t, os.WriteFile(path, []byte("second-token"), 0o600))
	s, err = f.read()
	require.NoError(t, err)
	require.Equal(t, "second-token", s)
	require.Equal(t, 1, logs.FilterMessageSnippet("secret file changed").Len())
	for _, e := range logs.All() {
		require.NotContains(t, fmt.Sprint(e.ContextMap()), "token\"", "the content is never logged")
	}

	require.NoError(t, os.WriteFile(path, []byte(" \n"), 0o600))
	_, err = f.read()
	require.ErrorContains(t, err, "kafka.sasl.token_file")
	require.ErrorContains(t, err, "is empty")
	require.NoError(t, os.Remove(path))
	_, err = f.read()
	require.ErrorContains(t, err, "EFFECTIVELY_KAFKA_SASL_TOKEN_FILE")
}

func TestClientOptsReportsTheKeyToFix(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
	base := config.Default().Kafka
	tests := []struct {
		name   string
		mutate func(k *config.Kafka)
		want   string
	}{
		{"ca without certificates", func(k *config.Kafka) { k.TLS = config.KafkaTLS{Enabled: true, CAFile: notPEM} },
			"kafka.tls.ca_file"},
		{"bad key pair", func(k *config.Kafka) {
			k.TLS = config.KafkaTLS{Enabled: true, CertFile: notPEM, KeyFile: notPEM}
		}, "EFFECTIVELY_KAFKA_TLS_CERT_FILE"},
		{"missing password file", func(k *config.Kafka) {
			k.SASL = config.KafkaSASL{Mechanism: config.SASLMechanismScramSHA512, Username: "u", PasswordFile: filepath.Join(dir, "nope")}
		}, "kafka.sasl.password_file"},
		{"unknown mechanism", func(k *config.Kafka) { k.SASL.Mechanism = "gssapi" }, "kafka.sasl.mechanism"},
	}
	for _, tt := range tests {
		k := base
		tt.mutate(&k)
		_, err := ClientOpts(k, nil)
		require.ErrorContains(t, err, tt.want, tt.name)
	}

	// Kafka's own spelling (SCRAM-SHA-512) is the same mechanism: the
	// options carry a SASL option (seeds, dial timeout, TLS, SASL).
	for _, m := range []string{config.SASLMechanismNone, config.SASLMechanismPlain, config.SASLMechanismScramSHA256, config.SASLMechanismScramSHA512,
		"NONE", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		k := base
		k.TLS.Enabled = true
		k.SASL = config.KafkaSASL{Mechanism: m}
		want := 3
		if config.NormalizeSASLMechanism(m) != config.SASLMechanismNone {
			k.SASL.Username, k.SASL.Password = "u", "p"
			want = 4
		}
		opts, err := ClientOpts(k, nil)
		require.NoError(t, err, m)
		require.Len(t, opts, want, m)
	}
}

func TestExplain(t *testing.T) {
	t.Parallel()

	k := config.Default().Kafka
	k.SASL = config.KafkaSASL{Mechanism: config.SASLMechanismScramSHA256, Username: "worker", Password: "hunter2"}
	k.TLS = config.KafkaTLS{Enabled: true, CAFile: "/etc/ca.pem"}
	tests := []struct {
		err  error
		want []string
	}{
		{fmt.Errorf("%w: Authentication failed", kerr.SaslAuthenticationFailed),
			[]string{"kafka.sasl.password (env EFFECTIVELY_KAFKA_SASL_PASSWORD)", `user "worker"`}},
		{kerr.UnsupportedSaslMechanism, []string{"kafka.sasl.mechanism"}},
		{&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}},
			[]string{"kafka.tls.ca_file (env EFFECTIVELY_KAFKA_TLS_CA_FILE)", "/etc/ca.pem"}},
		{x509.HostnameError{Certificate: &x509.Certificate{}, Host: "kafka"}, []string{"kafka.tls.server_name"}},
		{tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, []string{"kafka.tls.enabled"}},
		{errors.New("remote error: tls: certificate required"), []string{"kafka.tls.cert_file", "kafka.tls.key_file"}},
		{kerr.GroupAuthorizationFailed, []string{`Kafka denied User:worker: missing ACL READ on group "effectively"`, "--operation Read --group effectively"}},
		{kerr.TransactionalIDAuthorizationFailed, []string{`missing ACL WRITE on transactional-id "effectively-dlq-relay.effectively"`}},
	}
	for _, tt := range tests {
		got := Explain(tt.err, k)
		require.False(t, got == tt.err, "explained: %v", tt.err)
		require.ErrorIs(t, got, tt.err)
		for _, w := range tt.want {
			require.ErrorContains(t, got, w)
		}
		require.NotContains(t, got.Error(), "hunter2")
	}

	other := context.DeadlineExceeded
	require.Equal(t, other, Explain(other, k), "an error with nothing to explain comes back as it is")
	require.NoError(t, Explain(nil, k))

	plain := config.Default().Kafka
	require.ErrorContains(t, Explain(io.EOF, plain), "kafka.tls.enabled")
	require.ErrorContains(t, Explain(io.EOF, plain), "kafka.sasl.mechanism")
}

func TestOAuthTokenOnlyKafkaDenied(t *testing.T) {
	t.Parallel()

	d := &Denied{Principal: Principal(config.Kafka{SASL: config.KafkaSASL{Mechanism: config.SASLMechanismOAuthBearer}}),
		Operation: "IDEMPOTENT_WRITE", ResourceType: "cluster", Resource: "kafka-cluster", Err: kerr.ClusterAuthorizationFailed}
	require.Contains(t, d.Error(), "--allow-principal User:<principal> --operation IdempotentWrite --cluster")
	require.ErrorIs(t, d, kerr.ClusterAuthorizationFailed)
}
