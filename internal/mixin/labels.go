package mixin

import (
	"regexp"
	"slices"
	"strings"

	"github.com/lockgov/lockgov/internal/telemetry"
)

// ScrapeLabels are the labels every series has from its scrape (job,
// instance) or from the Prometheus that stores it (cluster, namespace),
// whatever its row of telemetry.Table says.
var ScrapeLabels = []string{"job", "instance", "cluster", "namespace"}

var (
	// grouping is a by/without/on/ignoring/group_left/group_right clause.
	grouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	// selector is a metric name (or none) and its label matchers.
	selector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)?\{([^}]*)\}`)
	// matcher is one label matcher: name, operator, value.
	matcher = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*$`)
	// up is Prometheus's own series of a scrape.
	up = regexp.MustCompile(`\bup\s*[{)\s]`)
	// aggregation is an aggregation operator applied without a clause
	// before its argument: sum(...), max(...).
	aggregation = regexp.MustCompile(`\b(sum|min|max|avg|count|group|stddev|stdvar)\s*\(`)
)

// seriesRow returns the table row of a series name (a histogram's _bucket,
// _count and _sum series are its row's).
func seriesRow(name string) (telemetry.Metric, bool) {
	if m, ok := telemetry.Lookup(name); ok {
		return m, true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, cut := strings.CutSuffix(name, suffix); cut {
			if m, ok := telemetry.Lookup(base); ok && m.Kind == telemetry.Histogram {
				return m, true
			}
		}
	}
	return telemetry.Metric{}, false
}

// neverMatches reports whether a matcher's value selects none of the
// values the table lists for the label (when it lists them): "=" a value
// not in the list, "=~" an alternative (a|b) that matches no listed value.
// Values with a Grafana variable ($var) are the user's choice.
func neverMatches(op, value string, listed []string) bool {
	if len(listed) == 0 || strings.Contains(value, "$") {
		return false
	}
	switch op {
	case "=":
		return !slices.Contains(listed, value)
	case "=~":
		for _, alt := range strings.Split(value, "|") {
			re, err := regexp.Compile("^(?:" + alt + ")$")
			if err != nil || strings.ContainsAny(alt, "()") {
				return false // not a plain alternation: leave it to promtool
			}
			if !slices.ContainsFunc(listed, re.MatchString) {
				return true
			}
		}
	}
	return false
}

// SeriesLabels returns the labels a series named name can carry: the
// table's labels of its row (and le for a histogram's _bucket series),
// the labels a recording rule keeps (recorded), and ScrapeLabels; ok is
// false for a name that is none of these.
func SeriesLabels(name string, recorded func(string) ([]string, bool)) (labels []string, ok bool) {
	if strings.Contains(name, ":") {
		if l, ok := recorded(name); ok {
			return append(slices.Clone(l), ScrapeLabels...), true
		}
		return nil, false
	}
	if name == "up" {
		return slices.Clone(ScrapeLabels), true
	}
	m, ok := seriesRow(name)
	if !ok {
		return nil, false
	}
	labels = append(slices.Clone(m.Labels), ScrapeLabels...)
	if m.Kind == telemetry.Histogram && strings.HasSuffix(name, "_bucket") {
		labels = append(labels, "le")
	}
	return labels, true
}

// UnknownLabels returns the label names the PromQL expression expr reads
// that none of the series it selects carries: a matcher's label not on
// its metric (or a value the table's row says the label never takes), a
// by/without/on/ignoring/group_left/group_right label on no metric of
// expr. A label renamed in the table (or misspelt in a query)
// cannot leave a panel that splits nothing or an alert that never fires.
// The check is lexical: it does not follow which metric each clause
// aggregates, only that some metric of expr has the label.
func UnknownLabels(expr string, recorded func(string) ([]string, bool)) []string {
	var unknown []string
	var all []string
	for _, name := range metricName.FindAllString(expr, -1) {
		l, _ := SeriesLabels(name, recorded)
		all = append(all, l...)
	}
	if up.MatchString(expr) {
		all = append(all, ScrapeLabels...)
	}
	add := func(label string) {
		if !slices.Contains(unknown, label) {
			unknown = append(unknown, label)
		}
	}
	for _, sel := range selector.FindAllStringSubmatch(expr, -1) {
		labels, ok := SeriesLabels(sel[1], recorded)
		if !ok {
			continue // not a lockgov name: UnknownMetrics reports it
		}
		for _, part := range strings.Split(sel[2], ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			m := matcher.FindStringSubmatch(part)
			if m == nil || !slices.Contains(labels, m[1]) {
				add(strings.TrimSpace(part))
				continue
			}
			if row, ok := seriesRow(sel[1]); ok && neverMatches(m[2], m[3], row.Values[m[1]]) {
				add(strings.TrimSpace(part))
			}
		}
	}
	for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
		for _, label := range strings.Split(g[2], ",") {
			if label = strings.TrimSpace(label); label != "" && !slices.Contains(all, label) {
				add(label)
			}
		}
	}
	return unknown
}

// ResultLabels returns the labels the result of expr can carry, for a
// legend's {{label}} or an alert annotation's $labels.label: the labels
// of its by clauses when it has any, none when it aggregates without one,
// else the labels of the series it selects.
func ResultLabels(expr string, recorded func(string) ([]string, bool)) []string {
	var out []string
	hasBy := false
	for _, g := range grouping.FindAllStringSubmatch(expr, -1) {
		if g[1] != "by" {
			continue
		}
		hasBy = true
		for _, label := range strings.Split(g[2], ",") {
			if label = strings.TrimSpace(label); label != "" {
				out = append(out, label)
			}
		}
	}
	if hasBy {
		if strings.Contains(expr, "histogram_quantile(") {
			out = slices.DeleteFunc(out, func(l string) bool { return l == "le" })
		}
		return out
	}
	if aggregation.MatchString(expr) {
		return nil
	}
	for _, name := range metricName.FindAllString(expr, -1) {
		l, _ := SeriesLabels(name, recorded)
		out = append(out, l...)
	}
	return out
}
