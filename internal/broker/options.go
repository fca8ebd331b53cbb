package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
)

// DialTimeout bounds one TCP connect (and TLS handshake) to a broker.
const DialTimeout = 5 * time.Second

// ClientOpts returns the options every Kafka client starts from: the seed
// brokers, the dial timeout, and TLS and SASL as k says. A client appends
// its own options (consumer group, producer settings, logger) after them.
// It reads the files k names once, to fail at start-up with the key to fix
// rather than at the first connection; log receives the notes that a secret
// file changed. SASL without TLS is allowed here and warned about once per
// command by whoever loads the configuration ([config.Config.Warnings]).
func ClientOpts(k config.Kafka, log *zap.Logger) ([]kgo.Opt, error) {
	if log == nil {
		log = zap.NewNop()
	}
	// A hand-built configuration may spell the mechanism as Kafka does
	// (SCRAM-SHA-512); config.Load already returns the constant.
	k.SASL.Mechanism = config.NormalizeSASLMechanism(k.SASL.Mechanism)
	if len(k.Brokers) == 0 {
		return nil, fmt.Errorf("kafka.brokers is empty; fix: set kafka.brokers (env %s) to e.g. 127.0.0.1:9092", config.EnvName("kafka.brokers"))
	}
	opts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...), kgo.DialTimeout(DialTimeout)}
	if k.TLS.Enabled {
		tc, err := TLSConfig("kafka.tls", config.TLSFiles{CAFile: k.TLS.CAFile, CertFile: k.TLS.CertFile, KeyFile: k.TLS.KeyFile, ServerName: k.TLS.ServerName})
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	mech, err := mechanism(k.SASL, log)
	if err != nil {
		return nil, err
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

// TLSConfig builds the TLS configuration of the client whose files are
// the keys under prefix (kafka.tls, schema_registry.tls). Verification
// stays on: an empty CA file means the system's roots, never "trust
// anything".
func TLSConfig(prefix string, t config.TLSFiles) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	caKey, certKey, keyKey := prefix+".ca_file", prefix+".cert_file", prefix+".key_file"
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, keyError(caKey, t.CAFile, fmt.Sprintf("cannot be read: %v", err), "a readable PEM file of the CA certificates that sign the server's certificate")
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, keyError(caKey, t.CAFile, "holds no PEM certificate", "a PEM file of CA certificates (-----BEGIN CERTIFICATE-----)")
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			return nil, fmt.Errorf("%s %s and %s %s: %w; fix: set %s (env %s) and %s (env %s) to a PEM certificate and its private key",
				certKey, t.CertFile, keyKey, t.KeyFile, err, certKey, config.EnvName(certKey), keyKey, config.EnvName(keyKey))
		}
		// Read at every handshake, so a certificate rotated on disk (by
		// cert-manager, say) is presented on the next connection.
		certFile, keyFile := t.CertFile, t.KeyFile
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("loading the client certificate (%s %s, %s %s): %w", certKey, certFile, keyKey, keyFile, err)
			}
			return &c, nil
		}
	}
	return tc, nil
}

// mechanism returns the SASL mechanism of s, nil for none. Passwords and
// tokens in files are read at every authentication.
func mechanism(s config.KafkaSASL, log *zap.Logger) (sasl.Mechanism, error) {
	secret := func(key, path, inline string) (func() (string, error), error) {
		if path == "" {
			return func() (string, error) { return inline, nil }, nil
		}
		f := &secretFile{key: key, path: path, log: log}
		if _, err := f.read(); err != nil {
			return nil, err
		}
		return f.read, nil
	}
	switch s.Mechanism {
	case "", config.SASLMechanismNone:
		return nil, nil
	case config.SASLMechanismPlain, config.SASLMechanismScramSHA256, config.SASLMechanismScramSHA512:
		password, err := secret("kafka.sasl.password_file", s.PasswordFile, s.Password)
		if err != nil {
			return nil, err
		}
		user := s.Username
		switch s.Mechanism {
		case config.SASLMechanismPlain:
			return plain.Plain(func(context.Context) (plain.Auth, error) {
				pw, err := password()
				return plain.Auth{User: user, Pass: pw}, err
			}), nil
		case config.SASLMechanismScramSHA256:
			return scram.Sha256(func(context.Context) (scram.Auth, error) {
				pw, err := password()
				return scram.Auth{User: user, Pass: pw}, err
			}), nil
		default:
			return scram.Sha512(func(context.Context) (scram.Auth, error) {
				pw, err := password()
				return scram.Auth{User: user, Pass: pw}, err
			}), nil
		}
	case config.SASLMechanismOAuthBearer:
		token, err := secret("kafka.sasl.token_file", s.TokenFile, "")
		if err != nil {
			return nil, err
		}
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			tok, err := token()
			return oauth.Auth{Token: tok}, err
		}), nil
	}
	return nil, keyError("kafka.sasl.mechanism", s.Mechanism, "is not a known mechanism", "none, plain, scram-sha-256, scram-sha-512 or oauthbearer")
}

// keyError is a configuration problem found while building the options.
func keyError(key, value, problem, want string) error {
	return fmt.Errorf("%s %q %s; fix: set %s (env %s) to %s", key, value, problem, key, config.EnvName(key), want)
}

// errEmptySecret is returned for a secret file with nothing but white space.
var errEmptySecret = errors.New("is empty")
