package deploy_test

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	promqlengine "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/stretchr/testify/require"
)

// TestAlertsFireWhenTheyShould evaluates each alert's expression with
// Prometheus' own query engine over series shaped as the workers export
// them: it fires for the situation it is named after, with the labels its
// annotations use, and stays silent for the look-alikes. Each scenario is
// written in promqltest's script language (load samples every minute from
// t=0 in promtool's expanding notation, evaluate at a time, expect exactly
// these series), run by a small interpreter over an in-memory store (the
// promqltest package would bring Prometheus' TSDB, and with it the cloud
// SDKs of its remote-write configuration, into go.mod). The expression is
// wrapped as (EXPR) * 0 + 1 so that a firing series reads 1 whatever its
// value; the alerts' "for" durations are Prometheus' to keep.
func TestAlertsFireWhenTheyShould(t *testing.T) {
	_, groups := alertQueries(t)
	exprs := map[string]string{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = strings.Join(strings.Fields(r.Expr), " ")
		}
	}
	const w = `job="effectively", namespace="payments"`
	scenarios := []struct {
		alert, script string
	}{
		{"EffectivelyLagGrowing", `
load 1m
  effectively_consumer_lag{` + w + `, instance="effectively-0", topic="t", partition="0"} 0+200x20
  effectively_consumer_lag{` + w + `, instance="effectively-0", topic="t", partition="1"} 5000x20
  effectively_consumer_lag{` + w + `, instance="effectively-1", topic="t", partition="2"} 0+10x20
  effectively_consumer_lag{` + w + `, instance="effectively-1", topic="t", partition="3"} 4000-200x20

eval instant at 15m (EXPR) * 0 + 1
  {` + w + `, topic="t", partition="0"} 1
`},
		{"EffectivelyPartitionRetrying", `
load 1m
  effectively_partition_state{` + w + `, instance="effectively-0", topic="t", partition="0", state="retrying"} 1x10
  effectively_partition_state{` + w + `, instance="effectively-0", topic="t", partition="0", state="running"} 0x10
  effectively_partition_state{` + w + `, instance="effectively-0", topic="t", partition="1", state="retrying"} 0x10
  effectively_partition_state{` + w + `, instance="effectively-0", topic="t", partition="1", state="running"} 1x10
  effectively_partition_state{` + w + `, instance="effectively-0", topic="t", partition="2", state="paused"} 1x10

eval instant at 5m (EXPR) * 0 + 1
  {` + w + `, topic="t", partition="0"} 1
`},
		{"EffectivelyDependencyDown", `
load 1m
  effectively_dependency_up{` + w + `, instance="effectively-0", dependency="postgres"} 1 0x9
  effectively_dependency_up{` + w + `, instance="effectively-0", dependency="kafka"} 1x10
  effectively_dependency_up{` + w + `, instance="effectively-1", dependency="postgres"} 1x10

eval instant at 5m (EXPR) * 0 + 1
  {` + w + `, instance="effectively-0", dependency="postgres"} 1
`},
		{"EffectivelyPartitionStopped", `
load 1m
  effectively_partition_state{` + w + `, instance="effectively-0", topic="t", partition="0", state="stopped"} 1x10
  effectively_partition_state{` + w + `, instance="effectively-0", topic="t", partition="1", state="stopped"} 0x10
  effectively_partition_state{` + w + `, instance="effectively-0", topic="t", partition="1", state="retrying"} 1x10

eval instant at 5m (EXPR) * 0 + 1
  {` + w + `, topic="t", partition="0"} 1
`},
		{"EffectivelyDeadLetters", `
load 1m
  effectively_dead_letters_total{` + w + `, instance="effectively-0", topic="t", reason="not_json"} 0x10 3x10
  effectively_dead_letters_total{` + w + `, instance="effectively-0", topic="t", reason="unknown_type"} 5x20

eval instant at 15m (EXPR) * 0 + 1
  {` + w + `, topic="t", reason="not_json"} 1

eval instant at 30m (EXPR) * 0 + 1
`},
		{"EffectivelyOutboxIntentUnknown", `
load 1m
  effectively_outbox_intents{` + w + `, instance="effectively-0", state="unknown"} 2x10
  effectively_outbox_intents{` + w + `, instance="effectively-1", state="unknown"} 2x10
  effectively_outbox_intents{` + w + `, instance="effectively-0", state="pending"} 50x10
  effectively_outbox_intents{job="other", namespace="payments", instance="other-0", state="unknown"} 0x10

eval instant at 5m (EXPR) * 0 + 1
  {` + w + `} 1
`},
		{"EffectivelyOutboxIntentDeadLettered", `
load 1m
  effectively_outbox_intents{` + w + `, instance="effectively-0", state="dead_lettered"} 1x10
  effectively_outbox_intents{job="other", namespace="payments", instance="other-0", state="dead_lettered"} 0x10
  effectively_outbox_intents{job="other", namespace="payments", instance="other-0", state="unknown"} 3x10

eval instant at 5m (EXPR) * 0 + 1
  {` + w + `} 1
`},
		{"EffectivelyOutboxPendingTooOld", `
load 1m
  effectively_outbox_oldest_pending_seconds{` + w + `, instance="effectively-0"} 1000x10
  effectively_outbox_oldest_pending_seconds{job="other", namespace="payments", instance="other-0"} 60x10

eval instant at 5m (EXPR) * 0 + 1
  {` + w + `} 1
`},
		{"EffectivelyParkedTooOld", `
load 1m
  effectively_parked_oldest_seconds{` + w + `, instance="effectively-0"} 4000x10
  effectively_parked_oldest_seconds{job="other", namespace="payments", instance="other-0"} 30x10

eval instant at 5m (EXPR) * 0 + 1
  {` + w + `} 1
`},
		// effectively-0 completed a pass a minute for 10 minutes, then none;
		// effectively-1 never held the pruner's lock (0). The "ok" job's
		// pruner passes throughout, though one of its replicas never does.
		// Silent at 30m (the last pass 20 minutes old), firing at 80m.
		{"EffectivelyPrunerStalled", `
load 1m
  effectively_pruner_last_pass_timestamp_seconds{` + w + `, instance="effectively-0"} 0+60x10 600x70
  effectively_pruner_last_pass_timestamp_seconds{` + w + `, instance="effectively-1"} 0x80
  effectively_pruner_last_pass_timestamp_seconds{job="ok", namespace="payments", instance="ok-0"} 0+60x80
  effectively_pruner_last_pass_timestamp_seconds{job="ok", namespace="payments", instance="ok-1"} 0x80

eval instant at 30m (EXPR) * 0 + 1

eval instant at 80m (EXPR) * 0 + 1
  {` + w + `} 1
`},
		// effectively-1 stopped answering scrapes after 5 minutes; node-0 is
		// not a worker; effectively-2 was removed by a scale-down (its
		// target left service discovery: no more up samples).
		{"EffectivelyWorkerDown", `
load 1m
  up{` + w + `, instance="effectively-0"} 1x30
  effectively_build_info{` + w + `, instance="effectively-0", version="v1", go_version="go1.26", build="effectively"} 1x30
  up{` + w + `, instance="effectively-1"} 1x5 0x25
  effectively_build_info{` + w + `, instance="effectively-1", version="v1", go_version="go1.26", build="effectively"} 1x5
  up{job="node", namespace="payments", instance="node-0"} 0x30
  up{` + w + `, instance="effectively-2"} 1x5
  effectively_build_info{` + w + `, instance="effectively-2", version="v1", go_version="go1.26", build="effectively"} 1x5

eval instant at 20m (EXPR) * 0 + 1
  {` + w + `, instance="effectively-1"} 1
`},
		{"EffectivelyNoWorkers", `
load 1m
  up{job="node", namespace="payments", instance="node-0"} 1x30

eval instant at 20m (EXPR) * 0 + 1
  {} 1

clear
load 1m
  effectively_build_info{` + w + `, instance="effectively-0", version="v1", go_version="go1.26", build="effectively"} 1x30

eval instant at 20m (EXPR) * 0 + 1
`},
	}
	engine := promqlengine.NewEngine(promqlengine.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	tested := map[string]bool{}
	for _, s := range scenarios {
		expr, ok := exprs[s.alert]
		require.True(t, ok, "no alert %s in %s", s.alert, alertsFile)
		tested[s.alert] = true
		t.Run(s.alert, func(t *testing.T) {
			runScript(t, engine, strings.ReplaceAll(s.script, "EXPR", expr))
		})
	}
	for alert := range exprs {
		require.True(t, tested[alert], "%s has no scenario here", alert)
	}
}

// runScript runs the subset of promqltest's language the scenarios use:
// "load 1m" blocks, "clear", and "eval instant at <duration> <expr>"
// followed by the exact series expected (none: the result must be empty).
func runScript(t *testing.T, engine *promqlengine.Engine, script string) {
	t.Helper()
	var store memStore
	lines := strings.Split(script, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		block := func() []string {
			var out []string
			for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "  ") {
				i++
				out = append(out, strings.TrimSpace(lines[i]))
			}
			return out
		}
		switch {
		case line == "":
		case line == "clear":
			store = memStore{}
		case line == "load 1m":
			for _, desc := range block() {
				lset, vals, err := promql.ParseSeriesDesc(desc)
				require.NoError(t, err, desc)
				var samples []chunks.Sample
				for j, v := range vals {
					if !v.Omitted {
						samples = append(samples, fsample{t: int64(j) * time.Minute.Milliseconds(), f: v.Value})
					}
				}
				store = append(store, storage.NewListSeries(lset, samples))
			}
		case strings.HasPrefix(line, "eval instant at "):
			at, expr, _ := strings.Cut(strings.TrimPrefix(line, "eval instant at "), " ")
			d, err := time.ParseDuration(at)
			require.NoError(t, err)
			q, err := engine.NewInstantQuery(context.Background(), store, nil, expr, time.Unix(0, 0).Add(d))
			require.NoError(t, err, expr)
			res := q.Exec(context.Background())
			require.NoError(t, res.Err, expr)
			vec, err := res.Vector()
			require.NoError(t, err)
			var got, want []string
			for _, s := range vec {
				got = append(got, s.Metric.String()+" "+strconvF(s.F))
			}
			for _, exp := range block() {
				sel, val, _ := strings.Cut(exp, "} ")
				lset, err := promql.ParseMetric(sel + "}")
				require.NoError(t, err, exp)
				want = append(want, lset.String()+" "+strings.TrimSpace(val))
			}
			sort.Strings(got)
			sort.Strings(want)
			require.Equal(t, want, got, "at %s: %s", at, expr)
			q.Close()
		default:
			t.Fatalf("script line %q: not load 1m, clear or eval instant at", line)
		}
	}
}

func strconvF(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// memStore is a storage.Queryable over series held in memory.
type memStore []storage.Series

func (m memStore) Querier(int64, int64) (storage.Querier, error) { return m, nil }

func (m memStore) Select(_ context.Context, _ bool, _ *storage.SelectHints, matchers ...*labels.Matcher) storage.SeriesSet {
	var out []storage.Series
	for _, s := range m {
		if matchAll(s.Labels(), matchers) {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].Labels(), out[j].Labels()) < 0 })
	return &seriesSet{series: out, i: -1}
}

func matchAll(lset labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(lset.Get(m.Name)) {
			return false
		}
	}
	return true
}

func (m memStore) LabelValues(context.Context, string, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (m memStore) LabelNames(context.Context, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (m memStore) Close() error { return nil }

type seriesSet struct {
	series []storage.Series
	i      int
}

func (s *seriesSet) Next() bool                        { s.i++; return s.i < len(s.series) }
func (s *seriesSet) At() storage.Series                { return s.series[s.i] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

// fsample is a float sample.
type fsample struct {
	t int64
	f float64
}

func (s fsample) T() int64                      { return s.t }
func (s fsample) ST() int64                     { return 0 }
func (s fsample) F() float64                    { return s.f }
func (s fsample) H() *histogram.Histogram       { return nil }
func (s fsample) FH() *histogram.FloatHistogram { return nil }
func (s fsample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s fsample) Copy() chunks.Sample           { return s }
