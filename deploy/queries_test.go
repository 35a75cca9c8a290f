package deploy

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// promql parses PromQL as Prometheus does by default.
var promql = parser.NewParser(parser.Options{})

// query is one PromQL expression of the dashboard or the alerts, and where.
type query struct {
	where, expr string
}

// scrapeLabels are the labels Prometheus gives every series it scrapes;
// pdlb's /metrics does not have them.
var scrapeLabels = []string{"instance", "job"}

// grafanaVar is a Grafana variable in an expression: $__rate_interval and
// the like, or a template variable ($instance).
var grafanaVar = regexp.MustCompile(`\$(__\w+|\w+)`)

// expandGrafana replaces the dashboard's variables with what Grafana would
// put there: an interval for the built-in ones, "all" for the others.
func expandGrafana(expr string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		switch v {
		case "$__rate_interval", "$__interval", "$__range":
			return "5m"
		}
		return ".*"
	})
}

// dashboardQueries returns every PromQL query of the dashboard at path: its
// panels' targets, and its template variables' label_values(metric, label)
// as the selector of metric.
func dashboardQueries(t *testing.T, path string) []query {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels     []grafanaPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %s", path, err)
	}
	var qs []query
	var walk func(panels []grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, p := range panels {
			for _, tg := range p.Targets {
				qs = append(qs, query{fmt.Sprintf("%s: panel %q", path, p.Title), expandGrafana(tg.Expr)})
			}
			walk(p.Panels) // a collapsed row holds its panels
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((\w+), *\w+\)$`)
	for _, v := range d.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
			qs = append(qs, query{fmt.Sprintf("%s: variable %q", path, v.Name), m[1]})
		} else if v.Definition != "" {
			t.Errorf("%s: variable %q: %q is not label_values(metric, label)", path, v.Name, v.Definition)
		}
	}
	return qs
}

// grafanaPanel is what dashboardQueries reads of a panel: its queries, and
// the panels of a collapsed row.
type grafanaPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

// alertQueries parses the rule file at path as Prometheus loads it (unknown
// fields refused, expressions and templates checked), and returns its
// expressions.
func alertQueries(t *testing.T, path string) []query {
	t.Helper()
	groups, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("%s: %s", path, err)
	}
	if groups == nil {
		t.FailNow()
	}
	var qs []query
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{fmt.Sprintf("%s: alert %s", path, r.Alert), r.Expr})
		}
	}
	return qs
}

// exposition is what a /metrics page serves: each series name with the
// label sets it has.
type exposition map[string][]labels.Labels

// parseExposition reads the series of a Prometheus text page.
func parseExposition(page string) (exposition, error) {
	e := exposition{}
	series := regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?) \S+$`)
	for _, m := range series.FindAllStringSubmatch(page, -1) {
		ls, err := promql.ParseMetric(m[1])
		if err != nil {
			return nil, fmt.Errorf("series %q: %w", m[1], err)
		}
		name := ls.Get(labels.MetricName)
		e[name] = append(e[name], ls)
	}
	return e, nil
}

// checkQuery returns what is wrong with q against e: a series name pdlb does
// not serve, a label matcher no series of that name satisfies, a grouping
// label none of the series aggregated has.
func checkQuery(q query, e exposition) []string {
	expr, err := promql.ParseExpr(q.expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %s", q.where, err)}
	}
	var problems []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			problems = append(problems, checkSelector(q.where, n, e)...)
		case *parser.AggregateExpr:
			problems = append(problems, checkGrouping(q.where, n, e)...)
		}
		return nil
	})
	return problems
}

// checkSelector: vs names a series pdlb serves, and each of its matchers
// but the scrape labels' matches one of its label sets.
func checkSelector(where string, vs *parser.VectorSelector, e exposition) []string {
	series, ok := e[vs.Name]
	if !ok {
		return []string{fmt.Sprintf("%s: pdlb serves no series %s", where, vs.Name)}
	}
	var problems []string
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName || slices.Contains(scrapeLabels, m.Name) {
			continue
		}
		if !slices.ContainsFunc(series, func(ls labels.Labels) bool { return m.Matches(ls.Get(m.Name)) }) {
			problems = append(problems, fmt.Sprintf("%s: no series %s has %s", where, vs.Name, m))
		}
	}
	return problems
}

// checkGrouping: each label of an aggregation's by (...) is on some series
// it aggregates, or a scrape label.
func checkGrouping(where string, agg *parser.AggregateExpr, e exposition) []string {
	var problems []string
	for _, l := range agg.Grouping {
		if slices.Contains(scrapeLabels, l) {
			continue
		}
		found := false
		parser.Inspect(agg.Expr, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				found = found || slices.ContainsFunc(e[vs.Name], func(ls labels.Labels) bool { return ls.Has(l) })
			}
			return nil
		})
		if !found {
			problems = append(problems, fmt.Sprintf("%s: no series under %s has the label %q", where, agg.Op, l))
		}
	}
	return problems
}
