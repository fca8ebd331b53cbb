package test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
)

// secureKafka is a broker of the test's own started by stack.sh with
// EFFECTIVELY_KAFKA_SECURITY=sasl_ssl: SASL_SSL and mutual-TLS listeners
// under the standard authorizer, with the CA, certificates and SCRAM users
// the script made in its folder.
type secureKafka struct {
	// plain is the PLAINTEXT (admin, super user) listener.
	plain []string
	// saslSSL and mTLS are the secured listeners.
	saslSSL, mTLS []string
	// dir is the instance folder: tls/ and secrets/.
	dir string
	// admin is a super user's admin client on the PLAINTEXT listener.
	admin *kadm.Client
}

func startSecureKafka(t *testing.T) *secureKafka {
	t.Helper()
	ports := make([]string, 4)
	for i := range ports {
		ports[i] = strconv.Itoa(freePort(t))
	}
	stackInstance(t, "kafka", "kafka-"+ports[0], "EFFECTIVELY_KAFKA_PORT="+ports[0],
		"EFFECTIVELY_KAFKA_CONTROLLER_PORT="+ports[1], "EFFECTIVELY_KAFKA_SASL_SSL_PORT="+ports[2],
		"EFFECTIVELY_KAFKA_SSL_PORT="+ports[3], "EFFECTIVELY_KAFKA_SECURITY=sasl_ssl", "EFFECTIVELY_KAFKA_HEAP=384m")
	stackDir := os.Getenv("EFFECTIVELY_STACK_DIR")
	if stackDir == "" {
		stackDir = "/var/tmp/effectively"
	}
	k := &secureKafka{
		plain:   []string{"127.0.0.1:" + ports[0]},
		saslSSL: []string{"127.0.0.1:" + ports[2]},
		mTLS:    []string{"127.0.0.1:" + ports[3]},
		dir:     filepath.Join(stackDir, "kafka-"+ports[0]),
	}
	k.admin = kadmOn(t, k.plain)
	return k
}

func (k *secureKafka) file(parts ...string) string {
	return filepath.Join(append([]string{k.dir}, parts...)...)
}

func (k *secureKafka) password(t *testing.T, user string) string {
	t.Helper()
	b, err := os.ReadFile(k.file("secrets", user+".password"))
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

// tlsEnv is the environment of a client of the SASL_SSL listener that
// trusts the test CA.
func (k *secureKafka) tlsEnv(brokers []string) []string {
	return []string{
		"EFFECTIVELY_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"EFFECTIVELY_KAFKA_TLS_ENABLED=true",
		"EFFECTIVELY_KAFKA_TLS_CA_FILE=" + k.file("tls", "ca.pem"),
	}
}

// workerACL is one ACL of the worker's principal, as docs/security.md
// lists them.
type workerACL struct {
	resource  string // topic, group, transactional-id
	name      string
	operation kadm.ACLOperation
}

// workerACLs are exactly the ACLs docs/security.md documents for a worker
// consuming topic in group (its dead-letter topic pre-created). READ and
// WRITE imply DESCRIBE.
func workerACLs(topic, group string) []workerACL {
	dlq, txn := topic+".dlq", "effectively-dlq-relay."+group
	return []workerACL{
		{"topic", topic, kadm.OpRead},
		{"topic", dlq, kadm.OpWrite}, {"topic", dlq, kadm.OpRead},
		{"group", group, kadm.OpRead},
		{"transactional-id", txn, kadm.OpWrite},
	}
}

func (a workerACL) builder(principal string) *kadm.ACLBuilder {
	b := kadm.NewACLs().Allow(principal).AllowHosts().Operations(a.operation).ResourcePatternType(kadm.ACLPatternLiteral)
	switch a.resource {
	case "topic":
		b = b.Topics(a.name)
	case "group":
		b = b.Groups(a.name)
	case "transactional-id":
		b = b.TransactionalIDs(a.name)
	}
	return b
}

func (k *secureKafka) grant(t *testing.T, principal string, acls ...workerACL) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range acls {
		res, err := k.admin.CreateACLs(ctx, a.builder(principal))
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err, "granting %+v", a)
		}
	}
}

func (k *secureKafka) revoke(t *testing.T, principal string, a workerACL) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := a.builder(principal)
	res, err := k.admin.DeleteACLs(ctx, b)
	require.NoError(t, err)
	n := 0
	for _, r := range res {
		require.NoError(t, r.Err)
		n += len(r.Deleted)
	}
	require.Equal(t, 1, n, "revoking %+v", a)
}

// otherCA writes a CA certificate that signed nothing the broker has.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the broker's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "other-ca.pem")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return path
}

// unsecuredJWT is a token Kafka's unsecured OAUTHBEARER validator (the
// test listener's) accepts: alg none, the principal in sub.
func unsecuredJWT(sub string, ttl time.Duration) string {
	enc := base64.RawURLEncoding.EncodeToString
	now := time.Now()
	return enc([]byte(`{"alg":"none"}`)) + "." +
		enc(fmt.Appendf(nil, `{"sub":%q,"iat":%d,"exp":%d}`, sub, now.Unix(), now.Add(ttl).Unix())) + "."
}
