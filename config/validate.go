package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// FieldError is one configuration problem: the key, its bad value, what is
// wrong, and how to fix it.
type FieldError struct {
	// Key is the configuration key, e.g. kafka.session_timeout or
	// topics[0].natural_key.
	Key string
	// Value is the offending value as text, URL passwords redacted.
	Value string
	// Problem says what is wrong with the value.
	Problem string
	// Fix says what to change, naming the environment variable (and flag) of
	// the key.
	Fix string
}

// Error renders e as
//
//	config: kafka.session_timeout = "2s": must be between 6s and 30m (...); fix: set kafka.session_timeout (env EFFECTIVELY_KAFKA_SESSION_TIMEOUT) to e.g. 45s
func (e *FieldError) Error() string {
	return fmt.Sprintf("config: %s = %q: %s; fix: %s", e.Key, e.Value, e.Problem, e.Fix)
}

// Validate checks every key and the rules between keys. It returns nil or all
// problems, as [errors.Join] of *[FieldError].
func (c Config) Validate() error {
	fes := c.validate()
	if len(fes) == 0 {
		return nil
	}
	errs := make([]error, len(fes))
	for i, fe := range fes {
		errs[i] = fe
	}
	return errors.Join(errs...)
}

// setFix is the fix for a key that has env (and maybe a flag): set it to ex.
func setFix(key, ex string) string {
	return fmt.Sprintf("set %s (%s) to e.g. %s", key, where(key), ex)
}

// where names the env var and flag of key.
func where(key string) string {
	if hasFlag(key) {
		return fmt.Sprintf("env %s, flag --%s", EnvName(key), FlagName(key))
	}
	return "env " + EnvName(key)
}

// fileFix is the fix for a file-only key (topics).
func fileFix(key, ex string) string {
	return fmt.Sprintf("in the config file, set %s to e.g. %s", key, ex)
}

// shortDur renders bounds the way people write them: 30m, not 30m0s.
func shortDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

type validator struct{ errs []*FieldError }

func (v *validator) add(key, value, problem, fix string) {
	value = redactValue(key, value)
	v.errs = append(v.errs, &FieldError{Key: key, Value: value, Problem: problem, Fix: fix})
}

func (v *validator) required(key, s string) {
	if strings.TrimSpace(s) == "" {
		v.add(key, s, "must not be empty", setFix(key, example(key)))
	}
}

func (v *validator) oneOf(key, s string, allowed ...string) {
	if !slices.Contains(allowed, s) {
		v.add(key, s, "must be one of "+strings.Join(allowed, ", "), setFix(key, example(key)))
	}
}

func (v *validator) durationBetween(key string, d, lo, hi time.Duration, why string) {
	if d < lo || d > hi {
		v.add(key, d.String(), fmt.Sprintf("must be between %s and %s%s", shortDur(lo), shortDur(hi), why), setFix(key, example(key)))
	}
}

func (v *validator) positiveDuration(key string, d time.Duration) {
	if d <= 0 {
		v.add(key, d.String(), "must be positive", setFix(key, example(key)))
	}
}

func (v *validator) intBetween(key string, n, lo, hi int64) {
	if n < lo || n > hi {
		v.add(key, strconv.FormatInt(n, 10), fmt.Sprintf("must be between %d and %d", lo, hi), setFix(key, example(key)))
	}
}

func (v *validator) optionalHTTPURL(key, s string) {
	if s == "" {
		return
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		v.add(key, s, "is not a URL: "+urlErr(err), setFix(key, example(key)))
	case u.Scheme != "http" && u.Scheme != "https":
		v.add(key, s, fmt.Sprintf("must be an absolute http or https URL (scheme is %q)", u.Scheme), setFix(key, example(key)))
	case u.Host == "":
		v.add(key, s, "has no host", setFix(key, example(key)))
	}
}

// urlErr is url.Parse's reason without the URL itself, which may hold a
// password.
func urlErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// hostPortProblem checks host:port; it returns "" when s is fine.
func hostPortProblem(s string, needHost bool, minPort int) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return "is not host:port (" + ae.Err + ")"
		}
		return "is not host:port"
	}
	if needHost && host == "" {
		return "has no host; expected host:port"
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < minPort || p > 65535 {
		return fmt.Sprintf("has port %q; expected a number between %d and 65535", port, minPort)
	}
	return ""
}

// topicNameProblem checks a Kafka topic name; it returns "" when s is fine.
func topicNameProblem(s string) string {
	switch {
	case s == "":
		return "is empty"
	case s == "." || s == "..":
		return "is not a legal topic name"
	case len(s) > 249:
		return fmt.Sprintf("is %d characters long; Kafka allows at most 249", len(s))
	}
	for _, r := range s {
		if !legalNameRune(r) {
			return fmt.Sprintf("contains %q; Kafka names may only contain ASCII letters, digits, '.', '_' and '-'", r)
		}
	}
	return ""
}

func legalNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

// pointerProblem checks an RFC 6901 JSON pointer; it returns "" when s is fine.
func pointerProblem(s string) string {
	if !strings.HasPrefix(s, "/") {
		return "is not a JSON pointer (RFC 6901): it must start with /"
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '~' && (i+1 == len(s) || (s[i+1] != '0' && s[i+1] != '1')) {
			return "is not a JSON pointer (RFC 6901): ~ must be followed by 0 or 1 (~0 is ~, ~1 is /)"
		}
	}
	return ""
}

// satAdd adds durations without overflowing.
func satAdd(a, b time.Duration) time.Duration {
	if s := a + b; (s > a) == (b > 0) {
		return s
	}
	if b > 0 {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(-1 << 63)
}

func (c Config) validate() []*FieldError {
	var v validator
	def := Default()

	k := c.Kafka
	if len(k.Brokers) == 0 {
		v.add("kafka.brokers", "", "must list at least one broker", setFix("kafka.brokers", example("kafka.brokers")))
	}
	for _, b := range k.Brokers {
		if p := hostPortProblem(b, true, 1); p != "" {
			v.add("kafka.brokers", b, p, setFix("kafka.brokers", example("kafka.brokers")))
		}
	}
	v.required("kafka.group", k.Group)
	if len(k.Topics) == 0 {
		v.add("kafka.topics", "", "must list at least one topic", setFix("kafka.topics", example("kafka.topics")))
	}
	for i, t := range k.Topics {
		if p := topicNameProblem(t); p != "" {
			v.add("kafka.topics", t, p, setFix("kafka.topics", example("kafka.topics")))
		} else if slices.Index(k.Topics, t) < i {
			v.add("kafka.topics", t, "is listed twice", setFix("kafka.topics", "a list without duplicates"))
		}
	}
	if k.InstanceID != "" {
		if p := topicNameProblem(k.InstanceID); p != "" {
			v.add("kafka.instance_id", k.InstanceID, strings.Replace(p, "topic name", "group instance ID", 1), setFix("kafka.instance_id", example("kafka.instance_id")))
		}
	}
	v.oneOf("kafka.group_protocol", k.GroupProtocol, GroupProtocolClassic, GroupProtocolConsumer)
	v.oneOf("kafka.start_offset", k.StartOffset, StartOffsetEarliest, StartOffsetLatest)
	v.oneOf("kafka.offset_out_of_range", k.OffsetOutOfRange, OffsetOutOfRangeStop, OffsetOutOfRangeLogStart)
	v.durationBetween("kafka.session_timeout", k.SessionTimeout, 6*time.Second, 30*time.Minute,
		" (the broker's group.min/max.session.timeout.ms)")
	v.durationBetween("kafka.rebalance_timeout", k.RebalanceTimeout, time.Second, 30*time.Minute, "")
	v.durationBetween("kafka.metadata_max_age", k.MetadataMaxAge, time.Second, time.Hour, "")
	v.required("kafka.client_id", k.ClientID)
	if k.FetchMaxBytes <= 0 {
		v.add("kafka.fetch_max_bytes", strconv.Itoa(int(k.FetchMaxBytes)), "must be positive", setFix("kafka.fetch_max_bytes", example("kafka.fetch_max_bytes")))
	}
	switch {
	case k.FetchMaxPartitionBytes <= 0:
		v.add("kafka.fetch_max_partition_bytes", strconv.Itoa(int(k.FetchMaxPartitionBytes)), "must be positive",
			setFix("kafka.fetch_max_partition_bytes", example("kafka.fetch_max_partition_bytes")))
	case k.FetchMaxBytes > 0 && k.FetchMaxPartitionBytes > k.FetchMaxBytes:
		v.add("kafka.fetch_max_partition_bytes", strconv.Itoa(int(k.FetchMaxPartitionBytes)),
			fmt.Sprintf("must not exceed kafka.fetch_max_bytes (%d)", k.FetchMaxBytes),
			fmt.Sprintf("set kafka.fetch_max_partition_bytes (%s) to at most %d, or raise kafka.fetch_max_bytes", where("kafka.fetch_max_partition_bytes"), k.FetchMaxBytes))
	}

	c.validateKafkaSecurity(&v)
	c.validateSchemaRegistry(&v)
	c.validatePostgres(&v)
	if c.HTTP.Addr != "" {
		if p := hostPortProblem(c.HTTP.Addr, false, 0); p != "" {
			v.add("http.addr", c.HTTP.Addr, p+"; empty disables the server", setFix("http.addr", example("http.addr")))
		}
	} else if c.HTTP.Pprof {
		v.add("http.pprof", "true", "needs the HTTP server, which http.addr = \"\" disables",
			fmt.Sprintf("set http.addr (%s) to e.g. %s, or set http.pprof (%s) to false", where("http.addr"), example("http.addr"), where("http.pprof")))
	}
	c.validateConsole(&v)
	v.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	v.oneOf("log.format", c.Log.Format, "json", "console")

	cs := c.Consumer
	v.intBetween("consumer.batch_max_records", int64(cs.BatchMaxRecords), 1, 100_000)
	v.durationBetween("consumer.batch_linger", cs.BatchLinger, 0, 10*time.Second, "")
	switch {
	case cs.MaxPayloadBytes < 1 || cs.MaxPayloadBytes > 64*mib:
		v.intBetween("consumer.max_payload_bytes", int64(cs.MaxPayloadBytes), 1, 64*mib)
	case k.FetchMaxBytes > 0 && cs.MaxPayloadBytes > int(k.FetchMaxBytes):
		v.add("consumer.max_payload_bytes", strconv.Itoa(cs.MaxPayloadBytes),
			fmt.Sprintf("must not exceed kafka.fetch_max_bytes (%d), the memory bound of one fetch", k.FetchMaxBytes),
			fmt.Sprintf("set consumer.max_payload_bytes (%s) to at most %d, or raise kafka.fetch_max_bytes", where("consumer.max_payload_bytes"), k.FetchMaxBytes))
	}
	v.intBetween("consumer.max_inflight_bytes", int64(cs.MaxInflightBytes), 1*mib, 16*1024*mib)
	switch {
	case cs.RevokeTimeout <= 0:
		v.positiveDuration("consumer.revoke_timeout", cs.RevokeTimeout)
	case cs.RevokeTimeout >= k.RebalanceTimeout:
		v.add("consumer.revoke_timeout", cs.RevokeTimeout.String(),
			fmt.Sprintf("must be shorter than kafka.rebalance_timeout (%s): a revoked partition must stop before the group moves on", k.RebalanceTimeout),
			fmt.Sprintf("set consumer.revoke_timeout (%s) well below %s, e.g. %s, or raise kafka.rebalance_timeout", where("consumer.revoke_timeout"), k.RebalanceTimeout, k.RebalanceTimeout/6))
	}

	v.durationBetween("shutdown.drain_timeout", c.Shutdown.DrainTimeout, time.Second, 10*time.Minute,
		" (keep it well inside the orchestrator's grace period: Kubernetes' terminationGracePeriodSeconds, 30 s by default)")

	v.positiveDuration("retry.initial", c.Retry.Initial)
	if c.Retry.Initial > 0 && c.Retry.Max < c.Retry.Initial {
		v.add("retry.max", c.Retry.Max.String(), fmt.Sprintf("must be at least retry.initial (%s)", c.Retry.Initial),
			fmt.Sprintf("set retry.max (%s) to %s or more, e.g. %s", where("retry.max"), c.Retry.Initial, max(c.Retry.Initial, def.Retry.Max)))
	}

	v.positiveDuration("parking.max_age", c.Parking.MaxAge)
	if c.Parking.MaxAttempts <= 0 {
		v.intBetween("parking.max_attempts", int64(c.Parking.MaxAttempts), 1, 1<<31-1)
	}
	if c.Parking.MaxPerResource <= 0 {
		v.intBetween("parking.max_per_resource", int64(c.Parking.MaxPerResource), 1, 1<<31-1)
	}

	c.validateRetention(&v)
	v.durationBetween("dedupe.prune_interval", c.Dedupe.PruneInterval, time.Second, 24*time.Hour, "")
	if g := c.Dedupe.GenerationInterval; g != 0 && c.Dedupe.Retention > 0 {
		v.durationBetween("dedupe.generation_interval", g, time.Second, c.Dedupe.Retention,
			" (dedupe.retention): each claim checks retention / generation_interval older generations; 0 means retention / 2")
	}
	v.positiveDuration("outbox.retention", c.Outbox.Retention)
	v.positiveDuration("outbox.call_timeout", c.Outbox.CallTimeout)
	v.positiveDuration("outbox.lease_grace", c.Outbox.LeaseGrace)
	if c.Outbox.Concurrency <= 0 || c.Outbox.Concurrency > 1024 {
		v.intBetween("outbox.concurrency", int64(c.Outbox.Concurrency), 1, 1024)
	}
	c.validateOutbound(&v)
	for _, name := range c.Redact.Params {
		if strings.TrimSpace(name) == "" || strings.ContainsAny(name, "=&?# ") {
			v.add("redact.params", name, "must be query parameter names", setFix("redact.params", "x_session,signed_hash"))
		}
	}

	names := make([]string, 0, len(c.Targets))
	for n := range c.Targets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t := c.Targets[n]
		v.optionalHTTPURL("targets."+n+".url", t.URL)
		if f := t.BearerTokenFile; f != "" {
			if _, err := readSecretFile(f); err != nil {
				v.add("targets."+n+".bearer_token_file", f, err.Error(), setFix("targets."+n+".bearer_token_file", "/run/secrets/"+n+"-token"))
			}
		}
		for key, f := range map[string]string{"ca_file": t.CAFile, "cert_file": t.CertFile, "key_file": t.KeyFile} {
			if f == "" {
				continue
			}
			if _, err := os.Stat(f); err != nil {
				v.add("targets."+n+"."+key, f, "cannot be read", setFix("targets."+n+"."+key, "/etc/effectively/"+n+"-"+strings.ReplaceAll(key, "_file", ".pem")))
			}
		}
		if pre := t.SecretPathPrefix; pre != "" && (!strings.HasPrefix(pre, "/") || strings.ContainsAny(pre, "?#")) {
			v.add("targets."+n+".secret_path_prefix", pre, "must be a path from the URL's root, without query or fragment",
				setFix("targets."+n+".secret_path_prefix", "/hooks/"))
		}
		if (t.CertFile == "") != (t.KeyFile == "") {
			v.add("targets."+n+".cert_file", t.CertFile, "a client certificate needs both cert_file and key_file", "set both targets."+n+".cert_file and targets."+n+".key_file, or neither")
		}
		for _, h := range t.HeaderFiles {
			name, file, ok := strings.Cut(h, "=")
			if !ok || strings.TrimSpace(name) == "" || file == "" {
				v.add("targets."+n+".header_files", h, "must be Name=/path/to/file", setFix("targets."+n+".header_files", "X-Api-Key=/run/secrets/"+n+"-key"))
				continue
			}
			if _, err := readSecretFile(file); err != nil {
				v.add("targets."+n+".header_files", h, "the file of header "+name+" "+err.Error(), setFix("targets."+n+".header_files", "X-Api-Key=/run/secrets/"+n+"-key"))
			}
		}
	}

	c.validateTopics(&v)
	c.validateSinks(&v)
	return v.errs
}

func (c Config) validatePostgres(v *validator) {
	const key = "postgres.url"
	const ex = "postgres://user@host:5432/dbname"
	s := c.Postgres.URL
	switch {
	case strings.TrimSpace(s) == "":
		v.add(key, s, "must not be empty", setFix(key, ex))
	case strings.Contains(s, "://"):
		u, err := url.Parse(s)
		switch {
		case err != nil:
			v.add(key, s, "is not a URL: "+urlErr(err), setFix(key, ex))
		case u.Scheme != "postgres" && u.Scheme != "postgresql":
			v.add(key, s, fmt.Sprintf("has scheme %q; expected postgres or postgresql", u.Scheme), setFix(key, ex))
		}
	case !strings.Contains(s, "host="):
		v.add(key, s, "is neither a postgres:// URL nor a keyword/value DSN with host=", setFix(key, ex))
	}
	if f := c.Postgres.PasswordFile; f != "" {
		if _, err := readSecretFile(f); err != nil {
			v.add("postgres.password_file", f, err.Error(), setFix("postgres.password_file", "/run/secrets/postgres-password"))
		} else if hasPassword(s) {
			v.add("postgres.password_file", f, "is set, and postgres.url carries a password too", "remove the password from postgres.url, or unset postgres.password_file")
		}
	}
	if d := c.Postgres.AnswerTimeout; d != 0 {
		v.durationBetween("postgres.answer_timeout", d, time.Second, time.Hour, " (0 derives it from statement_timeout)")
	}
	if n := c.Postgres.MaxConns; n != 0 && (n < 1 || n > 1000) {
		v.add("postgres.max_conns", strconv.Itoa(int(n)), "must be 0 (sized from the owned partitions) or between 1 and 1000",
			setFix("postgres.max_conns", example("postgres.max_conns")))
	}
}

// validateRetention enforces invariant 9: claims outlive every redelivery.
func (c Config) validateRetention(v *validator) {
	horizon, window, retention := c.Upstream.MaxRetryHorizon, c.Dedupe.ReconciliationWindow, c.Dedupe.Retention
	ok := true
	if horizon <= 0 {
		v.positiveDuration("upstream.max_retry_horizon", horizon)
		ok = false
	}
	if window < 0 {
		v.add("dedupe.reconciliation_window", window.String(), "must not be negative", setFix("dedupe.reconciliation_window", example("dedupe.reconciliation_window")))
		ok = false
	}
	if !ok {
		return
	}
	need := satAdd(satAdd(horizon, horizon), window)
	if retention < need {
		v.add("dedupe.retention", retention.String(),
			fmt.Sprintf("dedupe.retention (%s) must be at least 2 × upstream.max_retry_horizon (%s) + dedupe.reconciliation_window (%s) = %s, or a late redelivery is applied twice",
				retention, horizon, window, need),
			fmt.Sprintf("set dedupe.retention (%s) to %s or more, or lower upstream.max_retry_horizon or dedupe.reconciliation_window", where("dedupe.retention"), need))
	}
}

func (c Config) validateTopics(v *validator) {
	consumed := c.Kafka.Topics
	entry := map[string]int{}
	for i, t := range c.Topics {
		key := fmt.Sprintf("topics[%d].name", i)
		if t.Name == "" {
			v.add(key, "", "must not be empty", fileFix(key, "orders"))
			continue
		}
		if j, dup := entry[t.Name]; dup {
			v.add(key, t.Name, fmt.Sprintf("is already configured by topics[%d]", j), "merge the two entries into one")
			continue
		}
		entry[t.Name] = i
		if !slices.Contains(consumed, t.Name) {
			v.add(key, t.Name, "is not in kafka.topics, so it is never consumed",
				fmt.Sprintf("add it to kafka.topics (%s), or remove the entry", where("kafka.topics")))
		}
		c.validateTopic(v, fmt.Sprintf("topics[%d].", i), t)
	}
	for _, name := range consumed {
		if _, ok := entry[name]; !ok && topicNameProblem(name) == "" {
			c.validateTopic(v, "", Topic{Name: name})
		}
	}
}

// validateTopic checks the settings of one topic. prefix is "topics[i]." for
// an entry, "" for a topic with only the defaults (reported on kafka.topics).
func (c Config) validateTopic(v *validator, prefix string, raw Topic) {
	t := c.TopicSettings(raw.Name)
	if prefix != "" {
		// TopicSettings finds the first entry of the name; check this one.
		t = Config{Consumer: c.Consumer, Topics: []Topic{raw}}.TopicSettings(raw.Name)
	}
	key := func(field string) string { return prefix + field }
	fix := func(field, ex string) string { return fileFix(prefix+field, ex) }
	add := func(field, value, problem, ex string) {
		if prefix == "" {
			v.add("kafka.topics", t.Name, fmt.Sprintf("default %s %q: %s", field, value, problem),
				fmt.Sprintf("add a topics: entry for %s and %s", t.Name, fix(field, ex)))
			return
		}
		v.add(key(field), value, fmt.Sprintf("(topic %s) %s", t.Name, problem), fix(field, ex))
	}

	formatOK := true
	switch t.Format {
	case FormatCloudEvents, FormatJSON, FormatAvro, FormatProtobuf, FormatJSONSchema, FormatDebezium:
	default:
		add("format", t.Format, "must be one of cloudevents, json, avro, protobuf, jsonschema, debezium", FormatCloudEvents)
		formatOK = false
	}
	// A registry format with a type pointer is mapped as format json; one
	// without reads CloudEvents binary-mode headers.
	mapped := t.Format == FormatJSON || (IsRegistryFormat(t.Format) && t.TypePointer != "")
	strategyOK := true
	switch t.KeyStrategy {
	case KeyStrategyCloudEvents, KeyStrategyField, KeyStrategyNatural, KeyStrategyContentHash, KeyStrategyPosition:
	default:
		add("key_strategy", t.KeyStrategy, "must be one of cloudevents, field, natural, content-hash, position", KeyStrategyField)
		strategyOK = false
	}
	if strategyOK && formatOK && (t.KeyStrategy == KeyStrategyPosition) != (t.Format == FormatDebezium) {
		if t.Format == FormatDebezium {
			add("key_strategy", t.KeyStrategy, "format debezium keys its events by their log position and row: position (the default)", `"" (remove it), or position`)
		} else {
			add("key_strategy", t.KeyStrategy, "position is only for format debezium", KeyStrategyField)
		}
		strategyOK = false
	}

	pointers := []struct{ field, value string }{
		{"id_pointer", t.IDPointer}, {"type_pointer", t.TypePointer},
		{"subject_pointer", t.SubjectPointer}, {"version_pointer", t.VersionPointer},
		{"key_pointer", raw.KeyPointer},
	}
	for _, p := range pointers {
		if p.value != "" {
			if pp := pointerProblem(p.value); pp != "" {
				add(p.field, p.value, pp, "/id")
			}
		}
	}
	for _, p := range t.NaturalKey {
		if pp := pointerProblem(p); pp != "" {
			add("natural_key", p, pp, "[/order_id, /line]")
		}
	}

	if formatOK {
		switch {
		case mapped:
			if t.KeyStrategy == KeyStrategyCloudEvents {
				add("key_strategy", t.KeyStrategy,
					fmt.Sprintf("format %s has no CloudEvents source and id to key by", t.Format),
					"field (with key_pointer), natural (with natural_key) or content-hash")
			}
			if t.TypePointer == "" {
				add("type_pointer", "", "format json needs a pointer to the event type", "/type")
			}
			if t.SubjectPointer == "" {
				add("subject_pointer", "", fmt.Sprintf("format %s needs a pointer to the resource ID (the record key)", t.Format), "/data/order_id")
			}
		case IsRegistryFormat(t.Format):
			for _, p := range pointers[:4] {
				if p.value != "" {
					add(p.field, p.value, fmt.Sprintf("format %s without type_pointer reads CloudEvents binary-mode headers, which carry id, type, subject and resourceversion", t.Format),
						`"" (remove it), or set type_pointer and subject_pointer to map the payload`)
				}
			}
		case t.Format == FormatDebezium:
			for _, p := range pointers[:4] {
				if p.value != "" {
					add(p.field, p.value, "format debezium maps every change event the same way (the row key, the log position, the table and op)", `"" (remove it)`)
				}
			}
			if t.RequireSubject {
				add("require_subject", "true", "format debezium always has a subject: the row key, from the record key (a record without one is dead-lettered as missing_subject)", `false (remove it)`)
			}
		case t.Format == FormatCloudEvents:
			for _, p := range pointers[:4] {
				if p.value != "" {
					add(p.field, p.value, "is only used by format json; CloudEvents carry id, type, subject and resourceversion", `"" (remove it), or set format: json`)
				}
			}
		}
	}
	if strategyOK {
		if t.KeyStrategy == KeyStrategyField && t.KeyPointer == "" {
			add("key_pointer", "", "key strategy field needs key_pointer (or id_pointer) to the provider's event ID", "/id")
		}
		if t.KeyStrategy != KeyStrategyField && raw.KeyPointer != "" {
			add("key_pointer", raw.KeyPointer, fmt.Sprintf("is only used by key strategy field, not %s", t.KeyStrategy), `"" (remove it), or set key_strategy: field`)
		}
		if t.KeyStrategy == KeyStrategyNatural && len(t.NaturalKey) == 0 {
			add("natural_key", "", "key strategy natural needs the pointers that make the key", "[/order_id, /line]")
		}
		if t.KeyStrategy != KeyStrategyNatural && len(t.NaturalKey) > 0 {
			add("natural_key", strings.Join(t.NaturalKey, ","), fmt.Sprintf("is only used by key strategy natural, not %s", t.KeyStrategy), `[] (remove it), or set key_strategy: natural`)
		}
	}

	switch {
	case topicNameProblem(t.DLQ) != "":
		add("dlq", t.DLQ, "is not a legal topic name: "+topicNameProblem(t.DLQ), "orders.dlq")
	case t.DLQ == t.Name:
		add("dlq", t.DLQ, "is the topic itself", t.Name+".dlq")
	case slices.Contains(c.Kafka.Topics, t.DLQ):
		add("dlq", t.DLQ, "is a consumed topic (listed in kafka.topics); dead letters would be consumed again", t.Name+".dlq")
	}
}
