package config

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Warning is a setting that loads, and that the operator should hear about
// when a command starts: it works, and it is unsafe ([Config.Warnings]) or
// probably not what was meant ([EnvWarnings]). Every command that loads the
// configuration logs each one.
type Warning struct {
	// Setting is the key (kafka.sasl.mechanism) or the environment variable
	// (EFFECTIVELY_POSTGRES_ULR) the warning is about. A value is never part
	// of a warning: it may be a secret.
	Setting string
	// Problem says what is wrong and what follows from it.
	Problem string
	// Fix says what to change.
	Fix string
}

// String renders w as
//
//	config: EFFECTIVELY_POSTGRES_ULR: is not ...; fix: did you mean ...
func (w Warning) String() string {
	return fmt.Sprintf("config: %s: %s; fix: %s", w.Setting, w.Problem, w.Fix)
}

// Warnings returns what is valid in c but unsafe: today, SASL without TLS.
// Every SASL mechanism is accepted without kafka.tls.enabled, because a
// SASL_PLAINTEXT listener can be right (behind a service mesh whose sidecars
// encrypt, or on one host); each is warned about, PLAIN included, because
// what crosses the network in clear differs but is never nothing.
func (c Config) Warnings() []Warning {
	var out []Warning
	k := c.Kafka
	if !k.TLS.Enabled {
		var risk string
		switch m := NormalizeSASLMechanism(k.SASL.Mechanism); m {
		case SASLMechanismPlain:
			risk = "sends the password to the brokers in clear text: anyone on the network path reads it and can log in as " + saslUser(k.SASL)
		case SASLMechanismScramSHA256, SASLMechanismScramSHA512:
			risk = "does not send the password, but the salt, iteration count and proof cross the network in clear, so an eavesdropper who records one login can guess a weak password offline; " +
				"and every record, offset and commit of the session can be read and altered on the path"
		case SASLMechanismOAuthBearer:
			risk = "sends the OAUTHBEARER token in clear text: anyone on the network path can replay it as this principal until it expires"
		}
		if risk != "" {
			out = append(out, Warning{
				Setting: "kafka.sasl.mechanism",
				Problem: fmt.Sprintf("%s without kafka.tls.enabled to %s %s", NormalizeSASLMechanism(k.SASL.Mechanism), strings.Join(k.Brokers, ","), risk),
				Fix: fmt.Sprintf("set kafka.tls.enabled (%s) to true and point kafka.brokers at the brokers' SASL_SSL listener (docs/security.md); "+
					"leave it off only where the path is encrypted another way (a service mesh) or never leaves the host", where("kafka.tls.enabled")),
			})
		}
	}
	return out
}

func saslUser(s KafkaSASL) string {
	if s.Username == "" {
		return "this user"
	}
	return "User:" + s.Username
}

// nonConfigEnv are the EFFECTIVELY_ variables that are not configuration
// keys: the tools around the service read them, and a shell that runs those
// tools also runs the service. They are never reported by [EnvWarnings].
var nonConfigEnv = []string{
	// stack/stack.sh, stack/kafka-security.sh and stack/cdc.sh: the local stack.
	"EFFECTIVELY_STACK_DIR", "EFFECTIVELY_KEEP_STACK", "EFFECTIVELY_LOG_LINES",
	"EFFECTIVELY_PG_PORT", "EFFECTIVELY_PG_TLS",
	"EFFECTIVELY_KAFKA_PORT", "EFFECTIVELY_KAFKA_CONTROLLER_PORT", "EFFECTIVELY_KAFKA_SSL_PORT",
	"EFFECTIVELY_KAFKA_SASL_SSL_PORT", "EFFECTIVELY_KAFKA_SECURITY", "EFFECTIVELY_KAFKA_HEAP",
	"EFFECTIVELY_KAFKA_EXTRA_LISTENERS",
	"EFFECTIVELY_REGISTRY_PORT", "EFFECTIVELY_REGISTRY_MGMT_PORT", "EFFECTIVELY_REGISTRY_JAVA",
	"EFFECTIVELY_CDC_PG_PORT", "EFFECTIVELY_CONNECT_PORT", "EFFECTIVELY_CONNECT_HEAP",
	// The test suites' knobs (test/, deploy/, examples/orders-go).
	"EFFECTIVELY_MIGRATION_CLAIMS", "EFFECTIVELY_UPDATE_API", "EFFECTIVELY_UPDATE_SCREENSHOTS", "EFFECTIVELY_PRINT_MANIFESTS",
	"EFFECTIVELY_ORDERS_SEED", "EFFECTIVELY_ORDERS_EVENTS",
	// The worker's own schema compile child (event/schemacompile.go).
	"EFFECTIVELY_SCHEMA_COMPILE_CHILD",
}

// nonConfigEnvPrefixes start families of non-configuration variables: the
// test harness's services (EFFECTIVELY_TEST_POSTGRES_URL, …), make chaos's
// and make bench's knobs, and the crash point of the fault suites' build
// (by prefix: the release binary must not hold the crash point's variable
// name, TestCrashPointsOnlyInCrashpointBuild).
var nonConfigEnvPrefixes = []string{"EFFECTIVELY_TEST_", "EFFECTIVELY_CHAOS_", "EFFECTIVELY_BENCH_", "EFFECTIVELY_CRASH_"}

// serviceLink matches the variables Kubernetes adds to a pod for every
// Service of its namespace (enableServiceLinks, on by default): a Service
// named effectively or effectively-console gives EFFECTIVELY_SERVICE_HOST,
// EFFECTIVELY_CONSOLE_PORT_9410_TCP_ADDR and so on. The bare …_PORT form
// must also hold a URL such as tcp://10.0.0.1:9410 (see serviceLinkPort).
var serviceLink = regexp.MustCompile(`^EFFECTIVELY(_[A-Z0-9_]+?)?_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)$`)

var serviceLinkPort = regexp.MustCompile(`^EFFECTIVELY(_[A-Z0-9_]+)?_PORT$`)

// isNonConfigEnv reports whether the variable name=value is one of those
// the service knows is not meant for it.
func isNonConfigEnv(name, value string) bool {
	if slices.Contains(nonConfigEnv, name) {
		return true
	}
	for _, p := range nonConfigEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	if serviceLink.MatchString(name) {
		return true
	}
	return serviceLinkPort.MatchString(name) && (strings.HasPrefix(value, "tcp://") || strings.HasPrefix(value, "udp://") || strings.HasPrefix(value, "sctp://"))
}

// EnvWarnings returns a warning for every variable of environ (the form
// os.Environ returns, NAME=value) that looks meant for this build but that
// nothing reads, so that a misspelt EFFECTIVELY_POSTGRES_ULR is not silently
// ignored while the default postgres.url is used: a name with the
// EFFECTIVELY_ prefix that is no key's variable (with the closest one as a
// suggestion), a key that only the file sets (topics, sinks), and a name
// with the prefix in another case (variable names are case-sensitive).
// The tools' own variables (the test harness's EFFECTIVELY_TEST_…, the
// local stack's, Kubernetes' service links) are not reported.
//
// These are warnings, not errors as an unknown key in the file is: the
// environment is shared with every other program a platform starts, and a
// variable the service does not know must not stop it from starting.
func EnvWarnings(environ []string, exts ...Extension) []Warning {
	known := map[string]string{} // variable → key
	for _, l := range leaves {
		for _, env := range envNames(l.key, exts) {
			known[env] = l.key
		}
	}
	for _, k := range TargetKeys(exts...) {
		for _, env := range envNames(k, exts) {
			known[env] = k
		}
	}
	suffixes := make([]string, 0, len(known))
	for env := range known {
		suffixes = append(suffixes, strings.TrimPrefix(env, EnvPrefix))
	}
	sort.Strings(suffixes) // closest keeps the first of equally close names

	var out []Warning
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		upper := strings.ToUpper(name)
		if !strings.HasPrefix(upper, EnvPrefix) || isNonConfigEnv(name, value) {
			continue
		}
		if _, ok := known[name]; ok {
			continue
		}
		w := Warning{Setting: name, Problem: "is set, but it is not the environment variable of any configuration key, so it is ignored"}
		rest := strings.TrimPrefix(upper, EnvPrefix)
		switch key, ok := known[upper]; {
		case ok && name != upper:
			w.Problem = "is set, but environment variable names are case-sensitive, so it is ignored"
			w.Fix = fmt.Sprintf("rename it %s (%s)", upper, key)
		case upper == EnvName("topics") || upper == EnvName("sinks"):
			w.Problem = fmt.Sprintf("is set, but %s is a list of records that only the config file sets, so it is ignored", strings.ToLower(rest))
			w.Fix = fmt.Sprintf("write a %s: list in the file passed to --config, and unset %s", strings.ToLower(rest), name)
		default:
			if s := closest(rest, suffixes); s != "" {
				w.Fix = fmt.Sprintf("did you mean %s (%s)? rename it, or unset it", EnvPrefix+s, known[EnvPrefix+s])
			} else {
				w.Fix = "unset it; docs/reference/config.md lists every key's variable"
			}
			if names := targetNames(exts); strings.HasPrefix(rest, "TARGETS_") && len(names) > 0 {
				w.Fix += fmt.Sprintf(" (this build's targets are %s)", strings.Join(names, ", "))
			}
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Setting < out[j].Setting })
	return out
}
