package config

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// Extension is what a build adds to the engine's configuration: the names
// of its outbound targets, the older keys it still accepts, and its
// defaults. A build that sends to a warehouse API, say, declares the target
// warehouse, may keep accepting an older key such as effects.warehouse.url
// for targets.warehouse.url, and names its topics as the default.
type Extension struct {
	// Targets are the names of the build's targets; each gets the keys
	// targets.<name>.url (env EFFECTIVELY_TARGETS_<NAME>_URL) and so on. A
	// name is lowercase letters, digits and underscores.
	Targets []string
	// Aliases map an older key to the key that replaced it. Both are read
	// from the file and the environment; setting both in the file is an
	// error, and in the environment the newer name wins.
	Aliases map[string]string
	// Defaults changes the embedded defaults (see [Default]).
	Defaults func(*Config)
}

// targetFields are the keys of one target, below targets.<name>.
var targetFields = collectLeaves(reflect.TypeFor[Target](), "", nil)

// defaults are the engine's defaults with the builds' changes applied.
func defaults(exts []Extension) Config {
	c := Default()
	for _, x := range exts {
		if x.Defaults != nil {
			x.Defaults(&c)
		}
	}
	return c
}

// DefaultsOf returns the defaults a build with exts starts from.
func DefaultsOf(exts ...Extension) Config { return defaults(exts) }

func targetNames(exts []Extension) []string {
	var out []string
	for _, x := range exts {
		out = append(out, x.Targets...)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// TargetKeys returns the keys of the declared targets, for docs and help.
func TargetKeys(exts ...Extension) []string {
	var out []string
	for _, n := range targetNames(exts) {
		for _, f := range targetFields {
			out = append(out, "targets."+n+"."+f.key)
		}
	}
	return out
}

func isTargetKey(key string, exts []Extension) bool {
	return slices.Contains(TargetKeys(exts...), key) || isAlias(key, exts)
}

func isTargetSection(key string, exts []Extension) bool {
	for _, k := range TargetKeys(exts...) {
		if strings.HasPrefix(k, key+".") {
			return true
		}
	}
	return false
}

func isAlias(key string, exts []Extension) bool {
	for _, x := range exts {
		if _, ok := x.Aliases[key]; ok {
			return true
		}
	}
	return false
}

// envNames are the environment variables of key, newest name first.
func envNames(key string, exts []Extension) []string {
	names := []string{EnvName(key)}
	var olds []string
	for _, x := range exts {
		for old, k := range x.Aliases {
			if k == key {
				olds = append(olds, EnvName(old))
			}
		}
	}
	sort.Strings(olds) // a map's order is random; the choice must not be
	return append(names, olds...)
}

// applyAliases moves the values of older keys in the file to the keys that
// replaced them.
func applyAliases(path string, file map[string]any, exts []Extension) []error {
	var errs []error
	for _, x := range exts {
		olds := make([]string, 0, len(x.Aliases))
		for old := range x.Aliases {
			olds = append(olds, old)
		}
		sort.Strings(olds)
		for _, old := range olds {
			key := x.Aliases[old]
			val, ok := lookup(file, old)
			if !ok {
				continue
			}
			remove(file, old)
			if _, both := lookup(file, key); both {
				errs = append(errs, &FieldError{Key: old, Value: displayValue(old, val),
					Problem: fmt.Sprintf("is the older name of %s, which config file %s sets too", key, path),
					Fix:     fmt.Sprintf("keep only %s", key)})
				continue
			}
			put(file, key, val)
		}
	}
	return errs
}

func lookup(m map[string]any, key string) (any, bool) {
	segs := strings.Split(key, ".")
	for i, s := range segs {
		v, ok := m[s]
		if !ok {
			return nil, false
		}
		if i == len(segs)-1 {
			return v, true
		}
		if m, ok = v.(map[string]any); !ok {
			return nil, false
		}
	}
	return nil, false
}

// remove deletes key from m, and the sections it leaves empty.
func remove(m map[string]any, key string) {
	seg, rest, nested := strings.Cut(key, ".")
	if !nested {
		delete(m, seg)
		return
	}
	sub, ok := m[seg].(map[string]any)
	if !ok {
		return
	}
	remove(sub, rest)
	if len(sub) == 0 {
		delete(m, seg)
	}
}

func put(m map[string]any, key string, val any) {
	segs := strings.Split(key, ".")
	for _, s := range segs[:len(segs)-1] {
		sub, ok := m[s].(map[string]any)
		if !ok {
			sub = map[string]any{}
			m[s] = sub
		}
		m = sub
	}
	m[segs[len(segs)-1]] = val
}

// loadTargets reads every declared target from the environment (newest
// name first) and the file. A target the file names that the build does not
// declare is an error.
func loadTargets(path string, file map[string]any, exts []Extension) (map[string]Target, []error) {
	var errs []error
	names := targetNames(exts)
	if sect, ok := file["targets"].(map[string]any); ok {
		undeclared := make([]string, 0, len(sect))
		for n := range sect {
			if !slices.Contains(names, n) {
				undeclared = append(undeclared, n)
			}
		}
		sort.Strings(undeclared)
		for _, n := range undeclared {
			fix := "remove it"
			if len(names) > 0 {
				fix = fmt.Sprintf("this build's targets are %s; rename it or remove it", strings.Join(names, ", "))
			}
			errs = append(errs, &FieldError{Key: "targets." + n, Value: displayValue("targets."+n, sect[n]),
				Problem: fmt.Sprintf("is not a target of this build (config file %s)", path), Fix: fix})
		}
	}
	if len(names) == 0 {
		return nil, errs
	}
	out := make(map[string]Target, len(names))
	for _, n := range names {
		var t Target
		tv := reflect.ValueOf(&t).Elem()
		for _, f := range targetFields {
			key := "targets." + n + "." + f.key
			raw, from := any(nil), ""
			for _, env := range envNames(key, exts) {
				if s, ok := os.LookupEnv(env); ok {
					raw, from = s, "env "+env
					break
				}
			}
			if raw == nil {
				if val, ok := lookup(file, key); ok {
					raw, from = val, "config file "+path
				}
			}
			if raw == nil {
				continue
			}
			val, err := parseValue(raw, f.typ)
			if err != nil {
				errs = append(errs, &FieldError{Key: key, Value: displayValue(key, raw),
					Problem: fmt.Sprintf("%s (from %s)", err, from), Fix: setFix(key, "https://api.example.com/")})
				continue
			}
			tv.FieldByIndex(f.index).Set(val)
		}
		out[n] = t
	}
	return out, errs
}
