package broker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/effectively-io/effectively/config"
)

// Explain returns err as an error that names what to fix when it is one a
// misconfigured client meets: rejected SASL credentials name
// kafka.sasl.password (or the token file), an unknown certificate authority
// names kafka.tls.ca_file, a rejected client certificate
// kafka.tls.cert_file, a missing ACL the operation and resource. The
// returned error wraps err. Any other error is returned as it is, so a
// caller can tell (explained != err) whether to add its own message.
func Explain(err error, k config.Kafka) error {
	if err == nil {
		return nil
	}
	var denied *Denied
	if errors.As(err, &denied) {
		return err
	}
	s := k.SASL
	s.Mechanism = config.NormalizeSASLMechanism(s.Mechanism)
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		if s.Mechanism == config.SASLMechanismOAuthBearer {
			return fmt.Errorf("Kafka rejected the OAUTHBEARER token in kafka.sasl.token_file %s: %w; fix: write a valid, unexpired token to kafka.sasl.token_file (env %s)",
				s.TokenFile, err, config.EnvName("kafka.sasl.token_file"))
		}
		return fmt.Errorf("Kafka rejected the SASL %s credentials of user %q: %w; fix: check kafka.sasl.password (env %s) or kafka.sasl.password_file (env %s), and kafka.sasl.username (env %s)",
			s.Mechanism, s.Username, err, config.EnvName("kafka.sasl.password"), config.EnvName("kafka.sasl.password_file"), config.EnvName("kafka.sasl.username"))
	case errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		return fmt.Errorf("the brokers do not accept kafka.sasl.mechanism %q on this listener: %w; fix: set kafka.sasl.mechanism (env %s) to one the listener enables (sasl.enabled.mechanisms), or point kafka.brokers at the right listener",
			s.Mechanism, err, config.EnvName("kafka.sasl.mechanism"))
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return &Denied{Principal: Principal(k), Operation: "READ", ResourceType: "topic", Resource: strings.Join(k.Topics, ","), Err: err}
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return &Denied{Principal: Principal(k), Operation: "READ", ResourceType: "group", Resource: k.Group, Err: err}
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return &Denied{Principal: Principal(k), Operation: "WRITE", ResourceType: "transactional-id", Resource: "effectively-dlq-relay." + k.Group, Err: err}
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return &Denied{Principal: Principal(k), Operation: "IDEMPOTENT_WRITE", ResourceType: "cluster", Resource: "kafka-cluster", Err: err}
	}

	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	switch {
	case errors.As(err, &unknownCA):
		return fmt.Errorf("the broker's TLS certificate is not signed by a CA in kafka.tls.ca_file (%s): %w; fix: set kafka.tls.ca_file (env %s) to the PEM certificate of the CA that signed the brokers' certificates",
			orSystemRoots(k.TLS.CAFile), err, config.EnvName("kafka.tls.ca_file"))
	case errors.As(err, &hostname):
		return fmt.Errorf("the broker's TLS certificate is not valid for the name dialled: %w; fix: set kafka.brokers to a name the certificate lists, or kafka.tls.server_name (env %s) to one",
			err, config.EnvName("kafka.tls.server_name"))
	case errors.As(err, &invalid):
		return fmt.Errorf("the broker's TLS certificate is not valid (expired, or not for a server): %w; fix: renew the brokers' certificates, or check kafka.tls.ca_file (env %s)",
			err, config.EnvName("kafka.tls.ca_file"))
	case errors.As(err, &header):
		return fmt.Errorf("the broker did not answer TLS (kafka.tls.enabled is true): %w; fix: point kafka.brokers (env %s) at the TLS listener, or set kafka.tls.enabled (env %s) to false for a plaintext one",
			err, config.EnvName("kafka.brokers"), config.EnvName("kafka.tls.enabled"))
	}
	// A TLS alert from the broker comes as a net.OpError "remote error"
	// around an unexported type: only its text says which alert it is.
	msg := err.Error()
	if strings.Contains(msg, "remote error: tls:") {
		for _, a := range []string{"certificate required", "bad certificate", "unknown certificate authority", "certificate unknown", "expired certificate", "revoked certificate"} {
			if strings.Contains(msg, "tls: "+a) {
				return fmt.Errorf("the broker rejected the client certificate (%s): %w; fix: set kafka.tls.cert_file (env %s) and kafka.tls.key_file (env %s) to a certificate signed by a CA the brokers trust (ssl.truststore)",
					a, err, config.EnvName("kafka.tls.cert_file"), config.EnvName("kafka.tls.key_file"))
			}
		}
	}
	// A broker closes the connection on a plaintext client at a TLS
	// listener, or on an unauthenticated one at a SASL listener.
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(msg, "connection reset by peer") {
		var hints []string
		if !k.TLS.Enabled {
			hints = append(hints, fmt.Sprintf("if the listener uses TLS, set kafka.tls.enabled (env %s) to true", config.EnvName("kafka.tls.enabled")))
		}
		if s.Mechanism == "" || s.Mechanism == config.SASLMechanismNone {
			hints = append(hints, fmt.Sprintf("if it requires SASL, set kafka.sasl.mechanism (env %s)", config.EnvName("kafka.sasl.mechanism")))
		}
		if len(hints) > 0 {
			return fmt.Errorf("the broker closed the connection: %w; fix: %s", err, strings.Join(hints, "; "))
		}
	}
	return err
}

func orSystemRoots(caFile string) string {
	if caFile == "" {
		return "unset: the system's roots"
	}
	return caFile
}

// Principal names the Kafka principal the clients authenticate as, for
// messages: User:<username> for PLAIN and SCRAM; for OAUTHBEARER and
// certificates the broker derives it, and the message says so.
func Principal(k config.Kafka) string {
	switch config.NormalizeSASLMechanism(k.SASL.Mechanism) {
	case config.SASLMechanismPlain, config.SASLMechanismScramSHA256, config.SASLMechanismScramSHA512:
		return "User:" + k.SASL.Username
	case config.SASLMechanismOAuthBearer:
		return "the principal of the OAUTHBEARER token (its sub claim)"
	}
	if k.TLS.CertFile != "" {
		return "the principal of the client certificate (kafka.tls.cert_file)"
	}
	return "User:ANONYMOUS"
}

// Denied is an operation Kafka refused for lack of an ACL: which principal
// needs which operation on which resource.
type Denied struct {
	// Principal is who was refused, e.g. User:worker.
	Principal string
	// Operation is the ACL operation missing, e.g. READ.
	Operation string
	// ResourceType is topic, group, transactional-id or cluster.
	ResourceType string
	// Resource is the resource's name.
	Resource string
	// Err is the broker's error (TOPIC_AUTHORIZATION_FAILED, ...).
	Err error
}

// Error names the missing permission and how to grant it.
func (d *Denied) Error() string {
	return fmt.Sprintf("Kafka denied %s: missing ACL %s on %s %q (%v); fix: grant it, e.g. kafka-acls.sh --bootstrap-server <broker> --command-config <admin.properties> --add --allow-principal %s %s %s (docs/security.md lists every ACL the worker needs)",
		d.Principal, d.Operation, d.ResourceType, d.Resource, d.Err, aclPrincipal(d.Principal), aclOperations(d.Operation), aclResource(d.ResourceType, d.Resource))
}

// Unwrap returns the broker's error.
func (d *Denied) Unwrap() error { return d.Err }

func aclPrincipal(p string) string {
	if strings.HasPrefix(p, "User:") {
		return p
	}
	return "User:<principal>"
}

func aclOperations(op string) string {
	var out []string
	for _, o := range strings.Split(op, " and ") {
		out = append(out, "--operation "+kafkaACLName(o))
	}
	return strings.Join(out, " ")
}

// kafkaACLName is the spelling kafka-acls.sh takes: READ is Read,
// IDEMPOTENT_WRITE is IdempotentWrite.
func kafkaACLName(op string) string {
	var b strings.Builder
	for _, w := range strings.Split(strings.ToLower(op), "_") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

func aclResource(typ, name string) string {
	switch typ {
	case "topic":
		return "--topic " + name
	case "group":
		return "--group " + name
	case "transactional-id":
		return "--transactional-id " + name
	}
	return "--cluster"
}
