package alerts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lockgov/lockgov/internal/mixin"
	"github.com/lockgov/lockgov/internal/telemetry"
	"go.yaml.in/yaml/v3"
)

// runbookQuery is one PromQL expression of a runbook.
type runbookQuery struct {
	where string // file:line
	expr  string
}

var (
	// inlineCode is a markdown code span; one that names a lockgov metric
	// or recording rule is PromQL.
	inlineCode = regexp.MustCompile("`([^`]+)`")
	// selectorOf is a lockgov metric with its label matchers.
	selectorOf = regexp.MustCompile(`((?:[a-z_]+:)?lockgov_[a-z0-9_]+(?::[a-z0-9_]+)?)\{([^}]*)\}`)
	matcher    = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*$`)
)

// scrapeLabels are labels every series has from its scrape, whatever its
// row of the table says.
var scrapeLabels = []string{"job", "instance", "cluster", "namespace"}

// runbookQueries returns the PromQL of every runbook: each line of its
// ```promql blocks, and each inline code span that names a lockgov metric.
func runbookQueries(t *testing.T) []runbookQuery {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "docs", "runbooks", "Lockgov*.md"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no runbooks: %v", err)
	}
	var out []runbookQuery
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := "docs/runbooks/" + filepath.Base(p)
		fence := ""
		for i, line := range strings.Split(string(data), "\n") {
			where := fmt.Sprintf("%s:%d", name, i+1)
			trimmed := strings.TrimSpace(line)
			if lang, ok := strings.CutPrefix(trimmed, "```"); ok {
				if fence == "" {
					fence = lang
				} else {
					fence = ""
				}
				continue
			}
			switch fence {
			case "promql":
				if expr, _, _ := strings.Cut(trimmed, "#"); strings.TrimSpace(expr) != "" {
					out = append(out, runbookQuery{where, strings.TrimSpace(expr)})
				}
			case "":
				for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
					if strings.Contains(m[1], "lockgov_") {
						out = append(out, runbookQuery{where, m[1]})
					}
				}
			}
		}
	}
	return out
}

// TestRunbooks_PromQLNamesOnlyMetricsAndLabelsLockgovExports: a runbook's
// PromQL reads only rows of internal/telemetry's table (or recording rules
// of Groups), its label matchers name labels the metric has (or the
// scrape's), with a value the table lists where it lists them, and
// promtool parses it: a renamed metric, label or value cannot leave a
// query that shows nothing at 3 a.m.
func TestRunbooks_PromQLNamesOnlyMetricsAndLabelsLockgovExports(t *testing.T) {
	recorded := map[string]bool{}
	for _, g := range Groups(mixin.Default()) {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	queries := runbookQueries(t)
	for _, q := range queries {
		if u := mixin.UnknownMetrics(q.expr, func(n string) bool { return recorded[n] }); len(u) > 0 {
			t.Errorf("%s: %v in %q: neither a metric of internal/telemetry's table nor a recording rule", q.where, u, q.expr)
		}
		for _, sel := range selectorOf.FindAllStringSubmatch(q.expr, -1) {
			m, ok := metricRow(sel[1])
			if !ok {
				continue // a recording rule, or reported above
			}
			for _, part := range strings.Split(sel[2], ",") {
				mm := matcher.FindStringSubmatch(part)
				if mm == nil {
					t.Errorf("%s: %q in %q is not a label matcher (label=\"value\")", q.where, part, q.expr)
					continue
				}
				label, op, value := mm[1], mm[2], mm[3]
				if !slices.Contains(m.Labels, label) && !slices.Contains(scrapeLabels, label) {
					t.Errorf("%s: %s has no label %q (it has %v) in %q", q.where, m.Name, label, m.Labels, q.expr)
					continue
				}
				if vals := m.Values[label]; op == "=" && len(vals) > 0 && !slices.Contains(vals, value) {
					t.Errorf("%s: %s{%s} is never %q (it is one of %v) in %q", q.where, m.Name, label, value, vals, q.expr)
				}
			}
		}
	}
	if len(queries) < 20 {
		t.Errorf("found %d PromQL queries in the runbooks: the extraction is broken", len(queries))
	}
	promtoolParses(t, queries)
}

// metricRow is the table's row of name, or of the histogram name is a
// _bucket, _count or _sum series of.
func metricRow(name string) (telemetry.Metric, bool) {
	if m, ok := telemetry.Lookup(name); ok {
		return m, true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if m, ok := telemetry.Lookup(base); ok && m.Kind == telemetry.Histogram {
				return m, true
			}
		}
	}
	return telemetry.Metric{}, false
}

// promtoolParses has promtool check each query, as the expression of a
// recording rule.
func promtoolParses(t *testing.T, queries []runbookQuery) {
	t.Helper()
	bin := promtool(t)
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, q := range queries {
		rules = append(rules, rule{Record: fmt.Sprintf("runbook:query_%d:check", i), Expr: q.expr})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "runbooks", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "runbooks.rules.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "check", "rules", path).CombinedOutput(); err != nil {
		// Name the queries promtool refused: its errors name the rule.
		for i, q := range queries {
			if strings.Contains(string(out), fmt.Sprintf(`"runbook:query_%d:check"`, i)) {
				t.Errorf("%s: promtool refuses %q", q.where, q.expr)
			}
		}
		t.Errorf("promtool check rules on the runbooks' PromQL: %v\n%s", err, out)
	}
}
