package dashboards

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/lockgov/lockgov/alerts"
	"github.com/lockgov/lockgov/internal/mixin"
)

func recorded() map[string]bool {
	rec := map[string]bool{}
	for _, g := range alerts.Groups(mixin.Default()) {
		for _, r := range g.Rules {
			if r.Record != "" {
				rec[r.Record] = true
			}
		}
	}
	return rec
}

// TestAll_ParsesBackAndEveryTargetIsComplete holds what Grafana and a
// GitOps diff need: the JSON parses back into the SDK's dashboard type,
// panel ids are unique, every target has a refId (unique in its panel), an
// expr and the datasource variable, and every metric an expr reads is in
// internal/telemetry's table or a recording rule of alerts. (json.Unmarshal,
// not the SDK's UnmarshalJSONStrict: in v0.0.22 that returns an empty error
// list as a non-nil error for every panel and drops the panels.)
func TestAll_ParsesBackAndEveryTargetIsComplete(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	ds, err := All(mixin.Default())
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 5 {
		t.Fatalf("%d dashboards, want 5", len(ds))
	}
	rec := recorded()
	uids := map[string]bool{}
	for _, d := range ds {
		raw, err := JSON(d.Dashboard)
		if err != nil {
			t.Fatal(err)
		}
		var back dashboard.Dashboard
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatalf("%s does not parse back into dashboard.Dashboard: %v", d.File, err)
		}
		if err := back.Validate(); err != nil {
			t.Errorf("%s: %v", d.File, err)
		}
		if again, _ := JSON(back); !bytes.Equal(again, raw) {
			t.Errorf("%s: parsed back, it renders differently", d.File)
		}
		if uids[*back.Uid] {
			t.Errorf("uid %s twice", *back.Uid)
		}
		uids[*back.Uid] = true
		if back.Templating.List == nil || back.Templating.List[0].Name != DatasourceVariable || back.Templating.List[0].Type != "datasource" {
			t.Errorf("%s: the first variable is not the datasource variable", d.File)
		}

		var generic struct {
			Panels []struct {
				ID         int             `json:"id"`
				Title      string          `json:"title"`
				Datasource json.RawMessage `json:"datasource"`
				Targets    []struct {
					RefID      string `json:"refId"`
					Expr       string `json:"expr"`
					Datasource struct {
						UID string `json:"uid"`
					} `json:"datasource"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(raw, &generic); err != nil {
			t.Fatal(err)
		}
		ids := map[int]bool{}
		for _, p := range generic.Panels {
			if p.ID == 0 || ids[p.ID] {
				t.Errorf("%s: panel %q has id %d (zero or not unique)", d.File, p.Title, p.ID)
			}
			ids[p.ID] = true
			if !strings.Contains(string(p.Datasource), "${datasource}") {
				t.Errorf("%s: panel %q datasource %s", d.File, p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no target", d.File, p.Title)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.RefID == "" || refs[tg.RefID] || tg.Expr == "" || tg.Datasource.UID != "${datasource}" {
					t.Errorf("%s: panel %q target %+v: needs a unique refId, an expr and ${datasource}", d.File, p.Title, tg)
				}
				refs[tg.RefID] = true
				if u := mixin.UnknownMetrics(tg.Expr, func(n string) bool { return rec[n] }); len(u) > 0 {
					t.Errorf("%s: panel %q reads metrics not in internal/telemetry's table: %v", d.File, p.Title, u)
				}
			}
		}
	}
}

// TestAll_IsDeterministic: equal configs give byte-identical JSON, so a
// GitOps diff shows only real changes.
func TestAll_IsDeterministic(t *testing.T) {
	render := func() []byte {
		ds, err := All(mixin.Default())
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		for _, d := range ds {
			j, err := JSON(d.Dashboard)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(j)
		}
		return b.Bytes()
	}
	if !bytes.Equal(render(), render()) {
		t.Fatal("two renders differ")
	}
}

// TestAll_UsesTheConfigSelectors: a selector of the config block reaches
// every service query.
func TestAll_UsesTheConfigSelectors(t *testing.T) {
	cfg := mixin.Default()
	cfg.Selectors.Cluster = "prod-eu"
	ds, err := All(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		raw, _ := JSON(d.Dashboard)
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, `"expr"`) && strings.Contains(line, "lockgov_") && !strings.Contains(line, `cluster=~\"prod-eu\"`) {
				t.Errorf("%s: %s lacks the cluster selector", d.File, strings.TrimSpace(line))
			}
		}
	}
}

// recordedLabels returns the labels each recording rule of alerts keeps.
func recordedLabels(cfg mixin.Config) func(string) ([]string, bool) {
	kept := map[string][]string{}
	for _, g := range alerts.Groups(cfg) {
		for _, r := range g.Rules {
			if r.Record != "" {
				kept[r.Record] = mixin.ResultLabels(r.Expr, func(string) ([]string, bool) { return nil, false })
			}
		}
	}
	return func(name string) ([]string, bool) { l, ok := kept[name]; return l, ok }
}

// legendLabel is a {{label}} of a legend format.
var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// labelValues is a query variable's label_values(metric, label).
var labelValues = regexp.MustCompile(`^label_values\(\s*(([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// TestAll_QueriesLegendsAndVariablesUseOnlyLabelsTheMetricsHave: every
// label a dashboard reads — in a target's matchers and by clauses, in its
// legend ({{label}}, which must be one the query keeps), in a variable's
// label_values — is one the metric carries (its row of internal/telemetry's
// table, a recording rule's kept labels, the scrape's), with every selector
// of the config block set: a renamed label cannot leave a panel that shows
// one unlabelled line or a variable with no values.
func TestAll_QueriesLegendsAndVariablesUseOnlyLabelsTheMetricsHave(t *testing.T) {
	cfg := mixin.Default()
	cfg.Selectors = mixin.Selectors{Job: "payments-.*", AgentJob: "lockgov-agent", Cluster: "prod-eu", Namespace: "pay"}
	ds, err := All(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := recordedLabels(cfg)
	targets, variables := 0, 0
	for _, d := range ds {
		raw, err := JSON(d.Dashboard)
		if err != nil {
			t.Fatal(err)
		}
		var generic struct {
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr         string `json:"expr"`
					LegendFormat string `json:"legendFormat"`
				} `json:"targets"`
			} `json:"panels"`
			Templating struct {
				List []struct {
					Name  string          `json:"name"`
					Type  string          `json:"type"`
					Query json.RawMessage `json:"query"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(raw, &generic); err != nil {
			t.Fatal(err)
		}
		for _, p := range generic.Panels {
			for _, tg := range p.Targets {
				targets++
				if u := mixin.UnknownLabels(tg.Expr, rec); len(u) > 0 {
					t.Errorf("%s: panel %q reads labels its metrics do not have: %q in %s", d.File, p.Title, u, tg.Expr)
				}
				kept := mixin.ResultLabels(tg.Expr, rec)
				for _, m := range legendLabel.FindAllStringSubmatch(tg.LegendFormat, -1) {
					if !slices.Contains(kept, m[1]) {
						t.Errorf("%s: panel %q legend %q names {{%s}}, which %s does not keep (it keeps %v)", d.File, p.Title, tg.LegendFormat, m[1], tg.Expr, kept)
					}
				}
			}
		}
		for _, v := range generic.Templating.List {
			if v.Type != "query" {
				continue
			}
			variables++
			var q string
			if json.Unmarshal(v.Query, &q) != nil {
				var obj struct {
					Query string `json:"query"`
				}
				_ = json.Unmarshal(v.Query, &obj)
				q = obj.Query
			}
			m := labelValues.FindStringSubmatch(q)
			if m == nil {
				t.Errorf("%s: variable %s: query %s is not label_values(metric, label)", d.File, v.Name, v.Query)
				continue
			}
			labels, ok := mixin.SeriesLabels(m[2], rec)
			if !ok || !slices.Contains(labels, m[3]) {
				t.Errorf("%s: variable %s: %s has no label %s (it has %v)", d.File, v.Name, m[2], m[3], labels)
			}
			if u := mixin.UnknownLabels(m[1], rec); len(u) > 0 {
				t.Errorf("%s: variable %s: %s has no label %q", d.File, v.Name, m[1], u)
			}
		}
	}
	if targets < 30 || variables < 1 {
		t.Errorf("checked %d targets and %d query variables: the extraction is broken", targets, variables)
	}
}

// thresholdAlert finds the alert a panel's description says its line is
// the threshold of (a panel that plots the complement, "red below", is
// not one).
var thresholdAlert = regexp.MustCompile(`\bthe line is the (Lockgov[A-Z][A-Za-z0-9]*) threshold|\bas (Lockgov[A-Z][A-Za-z0-9]*) counts them; the line is its threshold`)

// outcomeMatcher is a matcher on a label that says how a request ended
// (the selectors' job, cluster, namespace and instance matchers differ
// between the dashboards and the rules by design).
var outcomeMatcher = regexp.MustCompile(`\b(result|outcome|kind|reason)(=~|!~|!=|=)"([^"]*)"`)

// TestAll_AThresholdLineMeasuresWhatItsAlertMeasures holds what a panel
// whose line is an alert's threshold promises: the panel plots the ratio
// the alert compares with that line. A panel that counted only
// result="error" while the alert counts result=~"error|not_replicated"
// would sit under the line while the alert fires.
func TestAll_AThresholdLineMeasuresWhatItsAlertMeasures(t *testing.T) {
	cfg := mixin.Default()
	exprs, recs := map[string]string{}, map[string]string{}
	for _, g := range alerts.Groups(cfg) {
		for _, r := range g.Rules {
			if r.Alert != "" {
				exprs[r.Alert] = r.Expr
			} else {
				recs[r.Record] = r.Expr
			}
		}
	}
	// A query of a recording rule counts what the rule's expression does.
	expand := func(e string) string {
		for name, def := range recs {
			if strings.Contains(e, name) {
				e += "\n" + def
			}
		}
		return e
	}
	for a, e := range exprs {
		exprs[a] = expand(e)
	}
	ds, err := All(cfg)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, d := range ds {
		raw, err := JSON(d.Dashboard)
		if err != nil {
			t.Fatal(err)
		}
		var generic struct {
			Panels []struct {
				Title       string `json:"title"`
				Description string `json:"description"`
				Targets     []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(raw, &generic); err != nil {
			t.Fatal(err)
		}
		for _, p := range generic.Panels {
			m := thresholdAlert.FindStringSubmatch(p.Description)
			if m == nil {
				continue
			}
			name := m[1] + m[2]
			expr, ok := exprs[name]
			if !ok {
				t.Errorf("%s: panel %q names alert %s, which the rules do not have", d.File, p.Title, name)
				continue
			}
			checked++
			for i := range p.Targets {
				p.Targets[i].Expr = expand(p.Targets[i].Expr)
			}
			for _, tg := range p.Targets {
				for _, om := range outcomeMatcher.FindAllString(tg.Expr, -1) {
					if !strings.Contains(expr, om) {
						t.Errorf("%s: panel %q plots %s, which alert %s does not count: %s", d.File, p.Title, om, name, expr)
					}
				}
			}
			for _, om := range outcomeMatcher.FindAllString(expr, -1) {
				if !slices.ContainsFunc(p.Targets, func(tg struct {
					Expr string `json:"expr"`
				}) bool {
					return strings.Contains(tg.Expr, om)
				}) {
					t.Errorf("%s: panel %q does not plot %s, which alert %s counts", d.File, p.Title, om, name)
				}
			}
		}
	}
	if checked < 4 {
		t.Errorf("checked %d threshold panels: the description match is broken", checked)
	}
}
