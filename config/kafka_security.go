package config

import (
	"fmt"
	"os"
	"strings"
)

// KafkaTLS configures TLS to the brokers. Certificates are always verified:
// there is no setting that turns verification off.
type KafkaTLS struct {
	// Enabled turns TLS on for every connection to the brokers.
	Enabled bool `mapstructure:"enabled"`
	// CAFile is a PEM file of the certificate authorities that sign the
	// brokers' certificates; empty means the system's roots.
	CAFile string `mapstructure:"ca_file"`
	// CertFile is the PEM client certificate (chain) presented to brokers
	// that require one (mutual TLS); it needs KeyFile. It is read again
	// when it changes, so a rotated certificate applies to new connections.
	CertFile string `mapstructure:"cert_file"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `mapstructure:"key_file"`
	// ServerName overrides the host name the brokers' certificates are
	// checked against (default: the host of the broker address dialled).
	ServerName string `mapstructure:"server_name"`
}

// KafkaSASL configures SASL authentication to the brokers.
type KafkaSASL struct {
	// Mechanism is none, plain, scram-sha-256, scram-sha-512 or oauthbearer,
	// in any case: Kafka's own spelling (SCRAM-SHA-512, PLAIN, OAUTHBEARER)
	// is the same mechanism. Without kafka.tls.enabled every mechanism but
	// none starts with a warning: plain sends the password and oauthbearer
	// the token as they are, and scram lets an eavesdropper guess the
	// password offline and read the session.
	Mechanism string `mapstructure:"mechanism"`
	// Username is the SASL user (plain and scram).
	Username string `mapstructure:"username"`
	// Password is the SASL password (plain and scram). Prefer PasswordFile;
	// it is redacted by [Config.Redacted].
	Password string `mapstructure:"password"`
	// PasswordFile is a file holding the SASL password (surrounding white
	// space ignored), read at every authentication, so a rotated password
	// applies to new connections.
	PasswordFile string `mapstructure:"password_file"`
	// TokenFile is a file holding the OAUTHBEARER token (oauthbearer), read
	// at every authentication: whatever refreshes the token rewrites the
	// file.
	TokenFile string `mapstructure:"token_file"`
}

// SASL mechanisms (kafka.sasl.mechanism).
const (
	// SASLMechanismNone is no authentication.
	SASLMechanismNone = "none"
	// SASLMechanismPlain is SASL/PLAIN.
	SASLMechanismPlain = "plain"
	// SASLMechanismScramSHA256 is SCRAM-SHA-256.
	SASLMechanismScramSHA256 = "scram-sha-256"
	// SASLMechanismScramSHA512 is SCRAM-SHA-512.
	SASLMechanismScramSHA512 = "scram-sha-512"
	// SASLMechanismOAuthBearer is OAUTHBEARER with a token read from a file.
	SASLMechanismOAuthBearer = "oauthbearer"
)

// NormalizeSASLMechanism returns the constant that m names: the mechanisms
// are case-insensitive, so Kafka's own spelling (SCRAM-SHA-512 in a Java
// client's sasl.mechanism and a broker's sasl.enabled.mechanisms, PLAIN,
// OAUTHBEARER) is accepted, and so is an underscore for a hyphen
// (SCRAM_SHA_512, as some tools and enums write it). Surrounding white
// space is ignored. Anything else is returned unchanged, for validation to
// name.
func NormalizeSASLMechanism(m string) string {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(m)), "_", "-")
	switch n {
	case SASLMechanismNone, SASLMechanismPlain, SASLMechanismScramSHA256, SASLMechanismScramSHA512, SASLMechanismOAuthBearer:
		return n
	}
	return m
}

// secretKeys are the keys whose values are secrets: [Config.Redacted] and
// every error message replace them.
var secretKeys = map[string]bool{
	"kafka.sasl.password": true,
}

// isSecretKey reports whether key holds a secret.
func isSecretKey(key string) bool { return secretKeys[key] }

// redactValue hides the secret in the value of key: a whole secret key, the
// password of a URL key.
func redactValue(key, s string) string {
	switch {
	case isSecretKey(key) && s != "":
		return redactedPassword
	case isURLKey(key):
		return redactURL(s)
	}
	return s
}

func init() {
	examples["kafka.tls.ca_file"] = "/etc/effectively/kafka-ca.pem"
	examples["kafka.tls.cert_file"] = "/etc/effectively/kafka-client.pem"
	examples["kafka.tls.key_file"] = "/etc/effectively/kafka-client.key"
	examples["kafka.tls.server_name"] = "kafka.internal.example.com"
	examples["kafka.sasl.username"] = "effectively"
	examples["kafka.sasl.password_file"] = "/run/secrets/kafka-password"
	examples["kafka.sasl.token_file"] = "/run/secrets/kafka-token"
}

// validateKafkaSecurity checks kafka.tls.* and kafka.sasl.*: settings that
// would be silently ignored, missing pairs, and files that cannot be read.
func (c Config) validateKafkaSecurity(v *validator) {
	t := c.Kafka.TLS
	if !t.Enabled {
		for _, f := range []struct{ key, val string }{
			{"kafka.tls.ca_file", t.CAFile}, {"kafka.tls.cert_file", t.CertFile},
			{"kafka.tls.key_file", t.KeyFile}, {"kafka.tls.server_name", t.ServerName},
		} {
			if f.val != "" {
				v.add(f.key, f.val, "is set but kafka.tls.enabled is false, so it would be ignored and the connection would not be encrypted",
					fmt.Sprintf("set kafka.tls.enabled (%s) to true, or unset %s", where("kafka.tls.enabled"), f.key))
			}
		}
	} else {
		v.readableFile("kafka.tls.ca_file", t.CAFile)
		v.readableFile("kafka.tls.cert_file", t.CertFile)
		v.readableFile("kafka.tls.key_file", t.KeyFile)
		switch {
		case t.CertFile != "" && t.KeyFile == "":
			v.add("kafka.tls.key_file", "", "must be set with kafka.tls.cert_file (the client certificate's private key)", setFix("kafka.tls.key_file", example("kafka.tls.key_file")))
		case t.KeyFile != "" && t.CertFile == "":
			v.add("kafka.tls.cert_file", "", "must be set with kafka.tls.key_file (the client certificate)", setFix("kafka.tls.cert_file", example("kafka.tls.cert_file")))
		}
	}

	s := c.Kafka.SASL
	s.Mechanism = NormalizeSASLMechanism(s.Mechanism) // a hand-built Config may hold Kafka's spelling
	notUsed := func(key, val, by string) {
		if val != "" {
			v.add(key, val, fmt.Sprintf("is only used by kafka.sasl.mechanism %s, not %q", by, s.Mechanism),
				fmt.Sprintf("unset %s (%s), or set kafka.sasl.mechanism (%s)", key, where(key), where("kafka.sasl.mechanism")))
		}
	}
	switch s.Mechanism {
	case SASLMechanismNone:
		notUsed("kafka.sasl.username", s.Username, "plain, scram-sha-256 or scram-sha-512")
		notUsed("kafka.sasl.password", s.Password, "plain, scram-sha-256 or scram-sha-512")
		notUsed("kafka.sasl.password_file", s.PasswordFile, "plain, scram-sha-256 or scram-sha-512")
		notUsed("kafka.sasl.token_file", s.TokenFile, "oauthbearer")
	case SASLMechanismPlain, SASLMechanismScramSHA256, SASLMechanismScramSHA512:
		v.required("kafka.sasl.username", s.Username)
		switch {
		case s.Password != "" && s.PasswordFile != "":
			v.add("kafka.sasl.password_file", s.PasswordFile, "is set together with kafka.sasl.password; only one may be",
				fmt.Sprintf("unset kafka.sasl.password (%s) and keep the file, or unset kafka.sasl.password_file (%s)", where("kafka.sasl.password"), where("kafka.sasl.password_file")))
		case s.Password == "" && s.PasswordFile == "":
			v.add("kafka.sasl.password_file", "", fmt.Sprintf("kafka.sasl.mechanism %s needs a password", s.Mechanism),
				fmt.Sprintf("set kafka.sasl.password_file (%s) to e.g. %s, or kafka.sasl.password (%s)",
					where("kafka.sasl.password_file"), example("kafka.sasl.password_file"), where("kafka.sasl.password")))
		default:
			v.readableFile("kafka.sasl.password_file", s.PasswordFile)
		}
		notUsed("kafka.sasl.token_file", s.TokenFile, "oauthbearer")
	case SASLMechanismOAuthBearer:
		if s.TokenFile == "" {
			v.add("kafka.sasl.token_file", "", "kafka.sasl.mechanism oauthbearer needs a token file", setFix("kafka.sasl.token_file", example("kafka.sasl.token_file")))
		}
		v.readableFile("kafka.sasl.token_file", s.TokenFile)
		notUsed("kafka.sasl.username", s.Username, "plain, scram-sha-256 or scram-sha-512")
		notUsed("kafka.sasl.password", s.Password, "plain, scram-sha-256 or scram-sha-512")
		notUsed("kafka.sasl.password_file", s.PasswordFile, "plain, scram-sha-256 or scram-sha-512")
	default:
		problem := "must be one of none, plain, scram-sha-256, scram-sha-512, oauthbearer (in any case: Kafka's SCRAM-SHA-512 is scram-sha-512)"
		if strings.EqualFold(strings.TrimSpace(s.Mechanism), "gssapi") {
			problem = "GSSAPI (Kerberos) is not supported; " + problem
		}
		v.add("kafka.sasl.mechanism", s.Mechanism, problem, setFix("kafka.sasl.mechanism", SASLMechanismScramSHA512))
	}
}

// readableFile checks that path, when set, is a regular file this process
// can open.
func (v *validator) readableFile(key, path string) {
	if path == "" {
		return
	}
	fix := fmt.Sprintf("point %s (%s) at a readable file, e.g. %s", key, where(key), example(key))
	fi, err := os.Stat(path)
	if err != nil {
		v.add(key, path, "cannot be read: "+strings.TrimPrefix(err.Error(), "stat "+path+": "), fix)
		return
	}
	if fi.IsDir() {
		v.add(key, path, "is a directory, not a file", fix)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		v.add(key, path, "cannot be read: "+strings.TrimPrefix(err.Error(), "open "+path+": "), fix)
		return
	}
	_ = f.Close()
}
