package config

import (
	"fmt"
	"net/url"
	"time"
)

// SchemaRegistry is the Confluent-compatible schema registry that topics
// of format avro, protobuf and jsonschema fetch their writers' schemas
// from (Confluent Schema Registry, Apicurio's ccompat API, Redpanda,
// Karapace). Credentials come from files only, read at every request, so a
// rotated secret applies without a restart.
type SchemaRegistry struct {
	// URL is the registry's base URL: http or https, no credentials in it
	// (e.g. https://registry.internal:8081, or Apicurio's
	// http://host:8080/apis/ccompat/v7).
	URL string `mapstructure:"url"`
	// Timeout bounds one request to the registry. A registry that does not
	// answer in time is unavailable: the record's partition retries, no
	// record is dead-lettered for it.
	Timeout time.Duration `mapstructure:"timeout"`
	// Username is the HTTP basic-auth user; it needs PasswordFile.
	Username string `mapstructure:"username"`
	// PasswordFile holds the basic-auth password (surrounding white space
	// ignored).
	PasswordFile string `mapstructure:"password_file"`
	// BearerTokenFile holds a token sent as "Authorization: Bearer <token>"
	// (not with Username).
	BearerTokenFile string `mapstructure:"bearer_token_file"`
	// TLS: the registry's CA and a client certificate (https URLs only).
	TLS TLSFiles `mapstructure:"tls"`
}

// TLSFiles are the PEM files of a TLS client. Certificates are always
// verified.
type TLSFiles struct {
	// CAFile holds the CA certificates that sign the server's certificate;
	// empty means the system's roots.
	CAFile string `mapstructure:"ca_file"`
	// CertFile is a client certificate (chain) for mutual TLS, read at
	// every handshake; it needs KeyFile.
	CertFile string `mapstructure:"cert_file"`
	// KeyFile is CertFile's private key.
	KeyFile string `mapstructure:"key_file"`
	// ServerName overrides the host name the server's certificate is
	// checked against.
	ServerName string `mapstructure:"server_name"`
}

// SchemaRegistryTimeoutDefault is the default of schema_registry.timeout.
const SchemaRegistryTimeoutDefault = 10 * time.Second

// Registry formats: records in the Confluent wire format, decoded with the
// writer's schema from schema_registry.
const (
	// FormatAvro is Avro binary.
	FormatAvro = "avro"
	// FormatProtobuf is a Protobuf message.
	FormatProtobuf = "protobuf"
	// FormatJSONSchema is JSON validated by a JSON Schema.
	FormatJSONSchema = "jsonschema"
	// FormatDebezium is Debezium's change events (not a registry format).
	FormatDebezium = "debezium"
)

// IsRegistryFormat reports whether format reads its schemas from
// schema_registry.
func IsRegistryFormat(format string) bool {
	return format == FormatAvro || format == FormatProtobuf || format == FormatJSONSchema
}

func init() {
	examples["schema_registry.url"] = "http://127.0.0.1:18081/apis/ccompat/v7"
	examples["schema_registry.timeout"] = "10s"
	examples["schema_registry.username"] = "effectively"
	examples["schema_registry.password_file"] = "/run/secrets/registry-password"
	examples["schema_registry.bearer_token_file"] = "/run/secrets/registry-token"
	examples["schema_registry.tls.ca_file"] = "/etc/effectively/registry-ca.pem"
	examples["schema_registry.tls.cert_file"] = "/etc/effectively/registry-client.pem"
	examples["schema_registry.tls.key_file"] = "/etc/effectively/registry-client.key"
	examples["schema_registry.tls.server_name"] = "registry.internal.example.com"
}

// validateSchemaRegistry checks schema_registry.*: a URL where a topic
// needs one, no credentials in it, credentials in pairs, readable files.
func (c Config) validateSchemaRegistry(v *validator) {
	r := c.SchemaRegistry
	var users []string
	for _, name := range c.Kafka.Topics {
		if IsRegistryFormat(c.TopicSettings(name).Format) {
			users = append(users, name)
		}
	}
	if r.URL == "" {
		if len(users) > 0 {
			v.add("schema_registry.url", "", fmt.Sprintf("must be set: topic %s has a registry format (avro, protobuf or jsonschema)", users[0]),
				setFix("schema_registry.url", example("schema_registry.url")))
		}
		return
	}
	v.optionalHTTPURL("schema_registry.url", r.URL)
	if u, err := url.Parse(r.URL); err == nil {
		if u.User != nil {
			v.add("schema_registry.url", r.URL, "carries credentials; they would be printed with every registry error",
				"remove them from the URL and set schema_registry.username and schema_registry.password_file")
		}
		if u.Scheme != "https" {
			for _, f := range []struct{ key, val string }{
				{"schema_registry.tls.ca_file", r.TLS.CAFile}, {"schema_registry.tls.cert_file", r.TLS.CertFile},
				{"schema_registry.tls.key_file", r.TLS.KeyFile}, {"schema_registry.tls.server_name", r.TLS.ServerName},
			} {
				if f.val != "" {
					v.add(f.key, f.val, "is set but schema_registry.url is not https, so it would be ignored",
						"use an https:// schema_registry.url, or unset "+f.key)
				}
			}
		}
	}
	v.durationBetween("schema_registry.timeout", r.Timeout, time.Second, 5*time.Minute, "")
	switch {
	case r.Username != "" && r.PasswordFile == "":
		v.add("schema_registry.password_file", "", "must be set with schema_registry.username", setFix("schema_registry.password_file", example("schema_registry.password_file")))
	case r.Username == "" && r.PasswordFile != "":
		v.add("schema_registry.username", "", "must be set with schema_registry.password_file", setFix("schema_registry.username", example("schema_registry.username")))
	}
	if r.BearerTokenFile != "" && r.Username != "" {
		v.add("schema_registry.bearer_token_file", r.BearerTokenFile, "and schema_registry.username are both set; a request carries one Authorization",
			"unset one of them")
	}
	switch {
	case r.TLS.CertFile != "" && r.TLS.KeyFile == "":
		v.add("schema_registry.tls.key_file", "", "must be set with schema_registry.tls.cert_file", setFix("schema_registry.tls.key_file", example("schema_registry.tls.key_file")))
	case r.TLS.KeyFile != "" && r.TLS.CertFile == "":
		v.add("schema_registry.tls.cert_file", "", "must be set with schema_registry.tls.key_file", setFix("schema_registry.tls.cert_file", example("schema_registry.tls.cert_file")))
	}
	for _, k := range []struct{ key, path string }{
		{"schema_registry.password_file", r.PasswordFile}, {"schema_registry.bearer_token_file", r.BearerTokenFile},
		{"schema_registry.tls.ca_file", r.TLS.CAFile}, {"schema_registry.tls.cert_file", r.TLS.CertFile}, {"schema_registry.tls.key_file", r.TLS.KeyFile},
	} {
		v.readableFile(k.key, k.path)
	}
}
