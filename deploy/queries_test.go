package deploy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
)

const (
	alertsFile    = "prometheus/alerts.yaml"
	dashboardFile = "grafana/effectively.json"
	runbooksDoc   = "../docs/operations/runbooks.md"
	runbookBase   = "https://github.com/effectively-io/effectively/blob/main/docs/operations/runbooks.md#"
)

// synthesized are series Prometheus makes itself for every target, not
// exported by the worker.
var synthesized = map[string]bool{"up": true}

var promql = parser.NewParser(parser.Options{})

// query is one PromQL expression and where it is.
type query struct {
	where string
	expr  string
}

// alertQueries parses the rule file as Prometheus does (unknown fields are
// errors, every expression and template is checked) and returns its
// expressions.
func alertQueries(t *testing.T) ([]query, *rulefmt.RuleGroups) {
	t.Helper()
	groups, errs := rulefmt.ParseFile(alertsFile, false, model.UTF8Validation, promql, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.Empty(t, errs, "%s does not load in Prometheus", alertsFile)
	var out []query
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			out = append(out, query{where: alertsFile + ": " + r.Alert, expr: r.Expr})
		}
	}
	require.NotEmpty(t, out)
	return out, groups
}

// grafanaVars are the dashboard's variables and Grafana's interval macros,
// replaced by values PromQL accepts before parsing.
var (
	grafanaInterval = regexp.MustCompile(`\$__(rate_interval|interval|range)\b`)
	grafanaVar      = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)
	labelValues     = regexp.MustCompile(`^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)
)

func substituteGrafana(expr string) string {
	expr = grafanaInterval.ReplaceAllString(expr, "5m")
	return grafanaVar.ReplaceAllString(expr, ".*")
}

// dashboardQueries returns every query of the dashboard: each panel's
// targets (rows' nested panels too) and each variable's label_values query
// (its series selector).
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var dash struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	var out []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				require.NotEmpty(t, tg.Expr, "panel %q has a target without an expression", p.Title)
				out = append(out, query{where: dashboardFile + ": panel " + p.Title, expr: tg.Expr})
			}
			if p.Type != "row" {
				require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
				require.NotEmpty(t, p.Description, "panel %q has no description", p.Title)
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := fmt.Sprint(v.Query)
		if m, ok := v.Query.(map[string]any); ok {
			q = fmt.Sprint(m["query"])
		}
		m := labelValues.FindStringSubmatch(q)
		require.NotNil(t, m, "variable %s: %q is not label_values(selector, label)", v.Name, q)
		out = append(out, query{where: dashboardFile + ": variable " + v.Name, expr: m[1]})
	}
	require.NotEmpty(t, out)
	return out
}

type panel struct {
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Targets     []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// metricNames parses expr and returns the metric names it selects. Every
// selector must name its metric: a query over "all metrics" cannot be
// checked.
func metricNames(q query) ([]string, error) {
	expr, err := promql.ParseExpr(substituteGrafana(q.expr))
	if err != nil {
		return nil, fmt.Errorf("%s: %q does not parse: %w", q.where, q.expr, err)
	}
	var names []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			err = fmt.Errorf("%s: the selector %s names no metric", q.where, vs)
		}
		names = append(names, name)
		return nil
	})
	if err == nil && len(names) == 0 {
		err = fmt.Errorf("%s: no metric in %q", q.where, q.expr)
	}
	return names, err
}

// usedMetrics is every metric name the dashboard and the rules use, with
// where each is used.
func usedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	alerts, _ := alertQueries(t)
	used := map[string][]string{}
	for _, q := range append(alerts, dashboardQueries(t)...) {
		names, err := metricNames(q)
		require.NoError(t, err)
		for _, n := range names {
			used[n] = append(used[n], q.where)
		}
	}
	return used
}

func TestQueriesParse(t *testing.T) {
	used := usedMetrics(t)
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("metrics used by the dashboard and the alert rules: %s", strings.Join(names, " "))
}

// A broken or unnamed query must fail (the check is not vacuous).
func TestQueriesParseRejectsBrokenQueries(t *testing.T) {
	for _, bad := range []string{
		`sum by (topic (effectively_consumer_lag)`,
		`rate(effectively_events_total{topic=~"$topic"}[$__rate_interval]`,
		`sum({topic="a"})`,
		`{__name__=~"effectively_.*"}`,
	} {
		_, err := metricNames(query{where: "test", expr: bad})
		require.Error(t, err, bad)
	}
	names, err := metricNames(query{where: "test", expr: `histogram_quantile(0.9, sum by (le) (rate(effectively_batch_apply_seconds_bucket{topic=~"$topic"}[$__rate_interval]))) / on() group_left up`})
	require.NoError(t, err)
	require.Equal(t, []string{"effectively_batch_apply_seconds_bucket", "up"}, names)
}

// TestAlertsHaveRunbooks: every alert has a severity and a runbook_url that
// points at an existing section of docs/operations/runbooks.md.
func TestAlertsHaveRunbooks(t *testing.T) {
	_, groups := alertQueries(t)
	doc, err := os.ReadFile(runbooksDoc)
	require.NoError(t, err)
	anchors := map[string]bool{}
	for _, l := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(l, "## "); ok {
			anchors[githubAnchor(h)] = true
		}
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "only alerting rules here")
			require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
			url := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, runbookBase)
			require.True(t, ok, "%s: runbook_url %q is not a section of docs/operations/runbooks.md", r.Alert, url)
			require.True(t, anchors[anchor], "%s: runbook_url anchor #%s is no heading of %s", r.Alert, anchor, runbooksDoc)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		}
	}
}

// githubAnchor is the fragment GitHub gives a heading: lower-cased,
// punctuation dropped, spaces turned into hyphens.
func githubAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}
