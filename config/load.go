package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// EnvPrefix starts every environment variable name.
const EnvPrefix = "EFFECTIVELY_"

// flags maps the command-line flags [BindFlags] registers to their keys. The
// flag name is the key with "." and "_" turned into "-"; type and default come
// from the key's field and [Default].
var flags = []struct{ key, usage string }{
	{"kafka.brokers", "Kafka seed brokers, host:port, comma-separated"},
	{"kafka.group", "consumer group ID"},
	{"kafka.topics", "topics to consume, comma-separated"},
	{"kafka.instance_id", "static group membership ID, e.g. the pod name (empty: dynamic membership)"},
	{"kafka.group_protocol", "group protocol: classic or consumer (KIP-848)"},
	{"kafka.start_offset", "where a partition without a stored offset starts: earliest or latest"},
	{"postgres.url", "PostgreSQL URL or keyword/value DSN"},
	{"http.addr", "health and metrics listen address, host:port (empty: no HTTP server)"},
	{"log.level", "log level: debug, info, warn or error"},
	{"log.format", "log format: json or console"},
	{"consumer.batch_max_records", "most records applied in one transaction"},
	{"consumer.batch_linger", "how long to wait to fill a batch"},
	{"outbox.resend_expired", "send again the side effects of events older than outbox.retention (a replay of old history); without it they are recorded as suppressed"},
}

// FlagName is the command-line flag of key ("kafka.instance_id" is
// "kafka-instance-id").
func FlagName(key string) string { return flagReplacer.Replace(key) }

// EnvName is the environment variable of key ("kafka.brokers" is
// "EFFECTIVELY_KAFKA_BROKERS").
func EnvName(key string) string { return EnvPrefix + strings.ToUpper(envReplacer.Replace(key)) }

var (
	flagReplacer = strings.NewReplacer(".", "-", "_", "-")
	envReplacer  = strings.NewReplacer(".", "_")
)

// hasFlag reports whether key has a flag, for fix messages.
func hasFlag(key string) bool {
	return slices.ContainsFunc(flags, func(f struct{ key, usage string }) bool { return f.key == key })
}

// BindFlags registers the flags of the common keys on fs, with the defaults
// of [Default] shown in --help. Pass the same fs to [Load]; a flag the user
// did not set never overrides the environment or the file. Flags already
// defined on fs are left alone.
func BindFlags(fs *pflag.FlagSet, exts ...Extension) {
	def := reflect.ValueOf(defaults(exts))
	for _, f := range flags {
		name := FlagName(f.key)
		if fs.Lookup(name) != nil {
			continue
		}
		l := leafByKey[f.key]
		usage := fmt.Sprintf("%s (env %s)", f.usage, EnvName(f.key))
		dv := def.FieldByIndex(l.index).Interface()
		switch dv := dv.(type) {
		case []string:
			fs.StringSlice(name, dv, usage)
		case string:
			fs.String(name, dv, usage)
		case int:
			fs.Int(name, dv, usage)
		case int32:
			fs.Int32(name, dv, usage)
		case bool:
			fs.Bool(name, dv, usage)
		case time.Duration:
			fs.Duration(name, dv, usage)
		default:
			panic(fmt.Sprintf("config: no flag type for %s (%T)", f.key, dv))
		}
	}
}

// Load returns the validated configuration from, highest precedence first,
// the flags in fs the user set, the environment, the YAML file at path and
// the defaults. path "" means no file; fs may be nil. All problems are
// reported at once, each as a *[FieldError] (joined), except a file that
// cannot be read or parsed, which is reported alone.
//
// exts are what the build adds: its targets, the older keys it still
// accepts, its defaults.
func Load(path string, fs *pflag.FlagSet, exts ...Extension) (Config, error) {
	v := viper.New()
	v.AllowEmptyEnv(true) // EFFECTIVELY_HTTP_ADDR= disables the server
	def := reflect.ValueOf(defaults(exts))
	for _, l := range leaves {
		v.SetDefault(l.key, def.FieldByIndex(l.index).Interface())
		if err := v.BindEnv(append([]string{l.key}, envNames(l.key, exts)...)...); err != nil {
			return Config{}, fmt.Errorf("binding %s: %w", l.key, err)
		}
	}

	var errs []error
	var file map[string]any
	if path != "" {
		var err error
		file, err = readFile(path)
		if err != nil {
			return Config{}, err
		}
		aliasErrs := applyAliases(path, file, exts)
		errs = append(errs, aliasErrs...)
		errs = append(errs, unknownKeys(path, file, exts)...)
		if err := v.MergeConfigMap(file); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", path, err)
		}
	}
	if fs != nil {
		for _, f := range flags {
			if pf := fs.Lookup(FlagName(f.key)); pf != nil {
				if err := v.BindPFlag(f.key, pf); err != nil {
					return Config{}, fmt.Errorf("binding flag --%s: %w", pf.Name, err)
				}
			}
		}
	}

	var c Config
	cv := reflect.ValueOf(&c).Elem()
	for _, l := range leaves {
		raw := v.Get(l.key)
		if raw == nil {
			// A parent key set to a scalar in the file shadows the key (that
			// is reported as an error above); fall back to the default.
			raw = def.FieldByIndex(l.index).Interface()
		}
		val, err := parseValue(raw, l.typ)
		if err != nil {
			cv.FieldByIndex(l.index).Set(def.FieldByIndex(l.index))
			errs = append(errs, &FieldError{
				Key:     l.key,
				Value:   displayValue(l.key, raw),
				Problem: fmt.Sprintf("%s (from %s)", err, source(v, fs, path, l.key)),
				Fix:     setFix(l.key, example(l.key)),
			})
			continue
		}
		cv.FieldByIndex(l.index).Set(val)
	}
	// Kafka's own spelling of a mechanism (SCRAM-SHA-512) is the same
	// mechanism; what Load returns uses one spelling, so every comparison
	// downstream is exact.
	c.Kafka.SASL.Mechanism = NormalizeSASLMechanism(c.Kafka.SASL.Mechanism)
	// A build's default topic settings stand beside the file's topics:
	// entries (the file's win by name); the file's sinks: list replaces the
	// build's.
	defaulted := def.Interface().(Config).clone()
	c.Sinks = defaulted.Sinks
	var fileTopics []Topic
	if raw := v.Get("topics"); raw != nil {
		topics, topicErrs := parseTopics(raw)
		fileTopics = topics
		errs = append(errs, topicErrs...)
	}
	var topicErr error
	c.Topics, topicErr = mergeTopics(fileTopics, defaulted.Topics, c.Kafka.Topics)
	if topicErr != nil {
		errs = append(errs, topicErr)
	}
	if raw := v.Get("sinks"); raw != nil {
		sinks, sinkErrs := parseSinks(raw)
		c.Sinks = sinks
		errs = append(errs, sinkErrs...)
	}
	targets, targetErrs := loadTargets(path, file, exts)
	c.Targets = targets
	errs = append(errs, targetErrs...)
	if len(errs) == 0 {
		if err := c.Validate(); err != nil {
			return Config{}, err
		}
		c.applyPasswordFile()
		return c, nil
	}
	// Report the rules too, so one run shows every problem, but not for keys
	// that did not parse: those hold their defaults, not the user's value.
	failed := make(map[string]bool, len(errs))
	for _, err := range errs {
		var fe *FieldError
		if errors.As(err, &fe) {
			failed[fe.Key] = true
			if i := strings.Index(fe.Key, "]"); strings.HasPrefix(fe.Key, "topics[") && i > 0 {
				failed[fe.Key[:i+1]] = true // the whole entry is suspect
			}
		}
	}
	for _, fe := range c.validate() {
		entry := fe.Key
		if i := strings.Index(entry, "]"); strings.HasPrefix(entry, "topics[") && i > 0 {
			entry = entry[:i+1]
		}
		if !failed[fe.Key] && !failed[entry] {
			errs = append(errs, fe)
		}
	}
	return Config{}, errors.Join(errs...)
}

// readFile reads and parses the YAML file at path into a map with lower-cased
// keys and without null values: a key written with no value (a section whose
// keys are all commented out) counts as not set.
func readFile(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("config file %s: no such file; fix: pass an existing file to --config or omit it", path)
	case err != nil:
		return nil, fmt.Errorf("config file %s: %w; fix: pass a readable YAML file to --config or omit it", path, err)
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: invalid YAML: %w", path, err)
	}
	if doc == nil {
		return map[string]any{}, nil
	}
	norm, err := normalize(doc, "")
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	m, ok := norm.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("config file %s: the document is a %s, not a mapping of keys; fix: start the file with keys such as kafka:", path, yamlKind(doc))
	}
	return m, nil
}

// normalize lower-cases map keys (keys are case-insensitive), turns every map
// into map[string]any and drops null values, recursively.
func normalize(v any, at string) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			if err := putNormalized(out, k, e, at); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			if err := putNormalized(out, fmt.Sprint(k), e, at); err != nil {
				return nil, err
			}
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			n, err := normalize(e, fmt.Sprintf("%s[%d]", at, i))
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	default:
		return v, nil
	}
}

func putNormalized(out map[string]any, k string, e any, at string) error {
	if e == nil {
		return nil
	}
	lk := strings.ToLower(k)
	key := joinKey(at, lk)
	if _, dup := out[lk]; dup {
		return fmt.Errorf("key %s appears twice (keys are case-insensitive); fix: keep one of them", key)
	}
	n, err := normalize(e, key)
	if err != nil {
		return err
	}
	out[lk] = n
	return nil
}

func joinKey(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

func yamlKind(v any) string {
	switch v.(type) {
	case []any:
		return "list"
	case map[string]any, map[any]any:
		return "mapping"
	case string:
		return "string"
	default:
		return fmt.Sprintf("%T value", v)
	}
}

// unknownKeys reports every key in the file that is not a configuration key,
// with the closest known key as a suggestion, so a typo never silently falls
// back to a default.
func unknownKeys(path string, m map[string]any, exts []Extension) []error {
	var errs []error
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			key := joinKey(prefix, k)
			val := m[k]
			if _, ok := leafByKey[key]; ok || key == "topics" || key == "sinks" || isTargetKey(key, exts) {
				continue // a wrong type is reported when the value is parsed
			}
			if key == "targets" || isTargetSection(key, exts) {
				if sub, ok := val.(map[string]any); ok {
					walk(key, sub)
					continue
				}
			}
			if sub, ok := val.(map[string]any); ok && isSection(key) {
				walk(key, sub)
				continue
			}
			if isSection(key) {
				errs = append(errs, &FieldError{
					Key:     key,
					Value:   displayValue(key, val),
					Problem: fmt.Sprintf("is a section in config file %s, not a value", path),
					Fix:     fmt.Sprintf("write its keys under it, e.g. %s", sectionExample(key)),
				})
				continue
			}
			fix := "remove it"
			if s := suggest(key); s != "" {
				fix = fmt.Sprintf("did you mean %s? rename it, or remove it", s)
			}
			errs = append(errs, &FieldError{
				Key:     key,
				Value:   displayValue(key, val),
				Problem: fmt.Sprintf("unknown key in config file %s", path),
				Fix:     fix,
			})
		}
	}
	walk("", m)
	return errs
}

// isSection reports whether key is a parent of configuration keys.
func isSection(key string) bool {
	for _, l := range leaves {
		if strings.HasPrefix(l.key, key+".") {
			return true
		}
	}
	return false
}

func sectionExample(section string) string {
	for _, l := range leaves {
		if rest, ok := strings.CutPrefix(l.key, section+"."); ok {
			segs := strings.Split(rest, ".")
			s := segs[len(segs)-1] + ": " + example(l.key)
			for i := len(segs) - 2; i >= 0; i-- {
				s = segs[i] + ": {" + s + "}"
			}
			return section + ": {" + s + "}"
		}
	}
	return section + ": {...}"
}

// suggest returns the known key or section closest to key, or "" when none
// is close: first a key with the same last segment in another section, then
// the closest by edit distance.
func suggest(key string) string {
	known := []string{"topics", "sinks"}
	seen := map[string]bool{}
	for _, l := range leaves {
		known = append(known, l.key)
		for i, r := range l.key {
			if r == '.' && !seen[l.key[:i]] {
				seen[l.key[:i]] = true
				known = append(known, l.key[:i])
			}
		}
	}
	last := key[strings.LastIndex(key, ".")+1:]
	if strings.Contains(key, ".") {
		for _, k := range known {
			if strings.Contains(k, ".") && k[strings.LastIndex(k, ".")+1:] == last {
				return k
			}
		}
	}
	return closest(key, known)
}

// closest returns the candidate nearest to s, or "" when none is within an
// edit distance of a third of s's length (at least 2).
func closest(s string, candidates []string) string {
	best, bestDist := "", math.MaxInt
	for _, c := range candidates {
		if d := levenshtein(s, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	if bestDist <= max(2, len(s)/3) {
		return best
	}
	return ""
}

// levenshtein is the edit distance between a and b, in bytes.
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// source names where the value of key came from, for parse errors.
func source(v *viper.Viper, fs *pflag.FlagSet, path, key string) string {
	if fs != nil && hasFlag(key) {
		if f := fs.Lookup(FlagName(key)); f != nil && f.Changed {
			return "flag --" + f.Name
		}
	}
	if _, ok := os.LookupEnv(EnvName(key)); ok {
		return "env " + EnvName(key)
	}
	if path != "" && v.InConfig(key) {
		return "config file " + path
	}
	return "the default"
}

// leaf is one configuration key and the Config field it sets.
type leaf struct {
	key   string
	index []int
	typ   reflect.Type
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	stringsType  = reflect.TypeFor[[]string]()
	boolPtrType  = reflect.TypeFor[*bool]()

	// leaves are the configuration keys, in struct order, derived from
	// Config's mapstructure tags so the key list is written once. Topics is
	// not among them: it is a list of records, parsed by parseTopics.
	leaves    = collectLeaves(reflect.TypeFor[Config](), "", nil)
	leafByKey = func() map[string]leaf {
		m := make(map[string]leaf, len(leaves))
		for _, l := range leaves {
			m[l.key] = l
		}
		return m
	}()
	// topicFields are the keys of a topics: entry.
	topicFields = collectLeaves(reflect.TypeFor[Topic](), "", nil)
)

func collectLeaves(t reflect.Type, prefix string, index []int) []leaf {
	var out []leaf
	for i := range t.NumField() {
		sf := t.Field(i)
		key := joinKey(prefix, tagName(sf))
		idx := append(slices.Clip(index), i)
		switch {
		case sf.Type.Kind() == reflect.Struct:
			out = append(out, collectLeaves(sf.Type, key, idx)...)
		case sf.Type.Kind() == reflect.Slice && sf.Type.Elem().Kind() == reflect.Struct,
			sf.Type.Kind() == reflect.Map:
			// Lists of records (topics) and named records (targets) are
			// parsed on their own.
		default:
			if !supported(sf.Type) {
				panic(fmt.Sprintf("config: key %s has unsupported type %s", key, sf.Type))
			}
			out = append(out, leaf{key: key, index: idx, typ: sf.Type})
		}
	}
	return out
}

func supported(t reflect.Type) bool {
	switch {
	case t == durationType, t == stringsType, t == boolPtrType:
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int32:
		return true
	}
	return false
}

// parseValue converts a raw value from any source (typed defaults, YAML
// scalars and lists, env and flag strings) to typ. Its error says what was
// expected, in words an operator can act on.
func parseValue(raw any, typ reflect.Type) (reflect.Value, error) {
	switch {
	case typ == durationType:
		d, err := parseDuration(raw)
		return reflect.ValueOf(d), err
	case typ == stringsType:
		s, err := parseStrings(raw)
		return reflect.ValueOf(s), err
	case typ == boolPtrType:
		if raw == nil {
			return reflect.Zero(typ), nil
		}
		b, err := parseBool(raw)
		return reflect.ValueOf(&b), err
	}
	switch typ.Kind() {
	case reflect.String:
		s, err := parseString(raw)
		return reflect.ValueOf(s).Convert(typ), err
	case reflect.Bool:
		b, err := parseBool(raw)
		return reflect.ValueOf(b), err
	case reflect.Int, reflect.Int32:
		n, err := parseInt(raw, typ.Bits())
		return reflect.ValueOf(n).Convert(typ), err
	}
	return reflect.Value{}, fmt.Errorf("unsupported type %s", typ)
}

func parseString(raw any) (string, error) {
	switch r := raw.(type) {
	case nil:
		return "", nil
	case string:
		return r, nil
	case bool, int, int64, uint64, float64:
		// YAML reads `group: 123` as a number; the user meant the text.
		return fmt.Sprint(r), nil
	}
	return "", fmt.Errorf("is a %s; expected a single value", yamlKind(raw))
}

func parseStrings(raw any) ([]string, error) {
	switch r := raw.(type) {
	case nil:
		return []string{}, nil
	case []string:
		return append([]string{}, r...), nil
	case string:
		// From env or a YAML scalar: comma-separated; empty fields (a trailing
		// comma) are dropped.
		out := []string{}
		for f := range strings.SplitSeq(r, ",") {
			if f = strings.TrimSpace(f); f != "" {
				out = append(out, f)
			}
		}
		return out, nil
	case []any:
		out := make([]string, 0, len(r))
		for i, e := range r {
			s, err := parseString(e)
			if err != nil {
				return nil, fmt.Errorf("item %d %s", i, err)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("is a %s; expected a list of strings (comma-separated in env and flags)", yamlKind(raw))
}

func parseDuration(raw any) (time.Duration, error) {
	const form = "expected a Go duration with a unit, such as 500ms, 45s, 1m30s or 168h"
	switch r := raw.(type) {
	case time.Duration:
		return r, nil
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(r))
		if err != nil {
			return 0, fmt.Errorf("is not a duration; %s", form)
		}
		return d, nil
	case int:
		if r == 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("is a bare number, which has no unit; %s", form)
	case int64, uint64, float64:
		return 0, fmt.Errorf("is a bare number, which has no unit; %s", form)
	}
	return 0, fmt.Errorf("is a %s; %s", yamlKind(raw), form)
}

func parseInt(raw any, bits int) (int64, error) {
	lo, hi := int64(math.MinInt64)>>(64-bits), int64(math.MaxInt64)>>(64-bits)
	form := fmt.Sprintf("expected a whole number between %d and %d", lo, hi)
	var n int64
	switch r := raw.(type) {
	case int:
		n = int64(r)
	case int32:
		n = int64(r)
	case int64:
		n = r
	case uint64:
		if r > math.MaxInt64 {
			return 0, fmt.Errorf("is too large; %s", form)
		}
		n = int64(r)
	case float64:
		if r != math.Trunc(r) || r < math.MinInt64 || r >= math.MaxInt64 {
			return 0, fmt.Errorf("is not a whole number; %s", form)
		}
		n = int64(r)
	case string:
		var err error
		n, err = strconv.ParseInt(strings.TrimSpace(r), 10, 64)
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("is too large; %s", form)
		}
		if err != nil {
			return 0, fmt.Errorf("is not a whole number; %s", form)
		}
	default:
		return 0, fmt.Errorf("is a %s; %s", yamlKind(raw), form)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("is out of range; %s", form)
	}
	return n, nil
}

func parseBool(raw any) (bool, error) {
	switch r := raw.(type) {
	case bool:
		return r, nil
	case string:
		b, err := strconv.ParseBool(strings.TrimSpace(r))
		if err != nil {
			return false, errors.New("is not a boolean; expected true or false")
		}
		return b, nil
	}
	return false, fmt.Errorf("is a %s; expected true or false", yamlKind(raw))
}

// mergeTopics is the topics: list a configuration runs with: the file's
// entries, then the build's default entries for the consumed topics the
// file does not name. A default entry for a topic not consumed is
// dropped (a deployment may consume a subset of the build's topics) —
// but when a consumed topic then has no settings at all, the topic was
// most likely renamed (kafka.topics from the environment) and would be
// read as CloudEvents: that is refused, naming both.
func mergeTopics(file, defaults []Topic, consumed []string) ([]Topic, error) {
	named := func(list []Topic, name string) bool {
		return slices.ContainsFunc(list, func(t Topic) bool { return t.Name == name })
	}
	out := file
	var dropped []Topic
	for _, d := range defaults {
		switch {
		case named(file, d.Name):
		case slices.Contains(consumed, d.Name):
			out = append(out, d)
		default:
			dropped = append(dropped, d)
		}
	}
	if len(dropped) == 0 {
		return out, nil
	}
	for _, name := range consumed {
		if !named(out, name) {
			d := dropped[0]
			return out, &FieldError{
				Key: "kafka.topics", Value: name,
				Problem: fmt.Sprintf("has no topics: entry, and this build's default settings are for topic %s (format %s), which is not consumed: %s would be read as format cloudevents",
					d.Name, orDefault(d.Format, FormatCloudEvents), name),
				Fix: fmt.Sprintf("give it its settings in the config file's topics: list, e.g. {name: %s, format: %s}; or consume %s", name, orDefault(d.Format, FormatCloudEvents), d.Name),
			}
		}
	}
	return out, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// parseTopics decodes the topics: list of the file.
func parseTopics(raw any) ([]Topic, []error) {
	return parseList[Topic](raw, recordList{
		key: "topics", noun: "topic", fields: topicFields, what: "topic settings", one: "the settings of one topic",
		example: "{name: orders, format: cloudevents}", fieldExample: topicExample,
	})
}

// recordList describes a list of records in the file (topics:, sinks:, a
// sink's columns:) for parseList.
type recordList struct {
	key          string // topics, sinks[0].columns
	noun         string // topic, sink, column
	fields       []leaf // the leaf keys of one record
	what, one    string // "topic settings", "the settings of one topic"
	example      string // one record in flow YAML
	fieldExample func(field string) string
	// nested decodes the fields that are lists of records themselves.
	nested map[string]func(key string, raw any, rv reflect.Value) []error
}

// parseList decodes a list of records of type T, reporting every problem
// with the record's key (topics[2].format) and a fix.
func parseList[T any](raw any, l recordList) ([]T, []error) {
	if raw == nil {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, []error{&FieldError{
			Key:     l.key,
			Value:   displayValue(l.key, raw),
			Problem: fmt.Sprintf("is a %s; expected a list of %s", yamlKind(raw), l.what),
			Fix:     fmt.Sprintf("in the config file, write %s: as a list, e.g. %s: [%s]", l.key, l.key, l.example),
		}}
	}
	if len(list) == 0 {
		return nil, nil
	}
	var errs []error
	out := make([]T, 0, len(list))
	for i, e := range list {
		prefix := fmt.Sprintf("%s[%d]", l.key, i)
		m, ok := e.(map[string]any)
		if !ok {
			errs = append(errs, &FieldError{
				Key:     prefix,
				Value:   displayValue(prefix, e),
				Problem: fmt.Sprintf("is a %s; expected %s", yamlKind(e), l.one),
				Fix:     fmt.Sprintf("in the config file, write %s as a mapping, e.g. %s", prefix, l.example),
			})
			continue
		}
		var t T
		tv := reflect.ValueOf(&t).Elem()
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		names := make([]string, 0, len(l.fields)+len(l.nested))
		for _, f := range l.fields {
			names = append(names, f.key)
		}
		for n := range l.nested {
			names = append(names, n)
		}
		for _, k := range keys {
			key := prefix + "." + k
			if parse, ok := l.nested[k]; ok {
				errs = append(errs, parse(key, m[k], tv)...)
				continue
			}
			i := slices.IndexFunc(l.fields, func(f leaf) bool { return f.key == k })
			if i < 0 {
				fix := "remove it"
				if s := closest(k, names); s != "" {
					fix = fmt.Sprintf("did you mean %s.%s? rename it, or remove it", prefix, s)
				}
				errs = append(errs, &FieldError{Key: key, Value: displayValue(k, m[k]), Problem: "unknown " + l.noun + " setting", Fix: fix})
				continue
			}
			f := l.fields[i]
			val, err := parseValue(m[k], f.typ)
			if err != nil {
				errs = append(errs, &FieldError{
					Key:     key,
					Value:   displayValue(k, m[k]),
					Problem: err.Error(),
					Fix:     fmt.Sprintf("in the config file, set %s to e.g. %s", key, l.fieldExample(k)),
				})
				continue
			}
			tv.FieldByIndex(f.index).Set(val)
		}
		out = append(out, t)
	}
	return out, errs
}

// examples are example values for keys whose default is empty.
var examples = map[string]string{
	"kafka.topics":               "orders",
	"kafka.instance_id":          "effectively-0",
	"postgres.max_conns":         "20",
	"postgres.answer_timeout":    "75s",
	"dedupe.generation_interval": "24h",
}

// example is a valid value of key in the form env and flags take.
func example(key string) string {
	if e, ok := examples[key]; ok {
		return e
	}
	l, ok := leafByKey[key]
	if !ok {
		return "..."
	}
	return formatValue(reflect.ValueOf(Default()).FieldByIndex(l.index).Interface())
}

func topicExample(field string) string {
	switch field {
	case "name":
		return "orders"
	case "format":
		return FormatJSON
	case "key_strategy":
		return KeyStrategyField
	case "natural_key":
		return "[/order_id, /line]"
	case "dlq":
		return "orders.dlq"
	case "check_partitioner":
		return "false"
	default:
		return "/id"
	}
}

// formatValue renders a typed value the way env and flags take it.
func formatValue(v any) string {
	switch v := v.(type) {
	case []string:
		return strings.Join(v, ",")
	case time.Duration:
		return shortDur(v)
	case *bool:
		if v == nil {
			return ""
		}
		return strconv.FormatBool(*v)
	}
	return fmt.Sprint(v)
}

// displayValue renders a raw value for an error message, with URL passwords
// redacted.
func displayValue(key string, raw any) string {
	var s string
	switch r := raw.(type) {
	case string:
		s = r
	case []any, map[string]any:
		s = flowYAML(r)
	default:
		s = formatValue(raw)
	}
	return redactValue(key, s)
}

// flowYAML renders a list or mapping from the file on one line, the way it
// could be written back.
func flowYAML(v any) string {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	var flow func(*yaml.Node)
	flow = func(n *yaml.Node) {
		n.Style |= yaml.FlowStyle
		for _, c := range n.Content {
			flow(c)
		}
	}
	flow(&n)
	b, err := yaml.Marshal(&n)
	if err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSpace(string(b))
}
