package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
	"github.com/lockgov/lockgov/internal/mixin"
)

// DatasourceVariable is the name of every dashboard's Prometheus data
// source variable; every panel and target queries "${datasource}".
const DatasourceVariable = "datasource"

var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${" + DatasourceVariable + "}")}

// board lays out one dashboard: panel ids in order from 1, refIds A, B, C
// per panel, and a grid filled left to right, so that equal code gives
// equal ids, refIds and positions.
type board struct {
	cfg    mixin.Config
	db     *dashboard.DashboardBuilder
	extra  []string // matchers every service query adds (the pattern variable)
	nextID uint32
	x, y   uint32
	rowH   uint32
}

func newBoard(cfg mixin.Config, uid, title, description string, tags ...string) *board {
	db := dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags(append([]string{"lockgov"}, tags...)).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Refresh("30s").
		Time("now-3h", "now").
		Timezone(common.TimeZoneUtc).
		WithVariable(dashboard.NewDatasourceVariableBuilder(DatasourceVariable).
			Label("Data source").
			Type("prometheus"))
	return &board{cfg: cfg, db: db}
}

// query is one target of a panel.
type query struct {
	expr, legend string
	exemplar     bool
	heatmap      bool
}

func q(expr, legend string) query { return query{expr: expr, legend: legend} }

// svc and agt select a metric with the config block's selectors (and the
// board's extra matchers for service metrics).
func (b *board) svc(name string, extra ...string) string {
	return selector(name, b.cfg.Selector(append(append([]string(nil), b.extra...), extra...)...))
}

func (b *board) agt(name string, extra ...string) string {
	return selector(name, b.cfg.AgentSelector(extra...))
}

func selector(name, matchers string) string {
	if matchers == "" {
		return name
	}
	return name + "{" + matchers + "}"
}

func (b *board) id() uint32 {
	b.nextID++
	return b.nextID
}

// pos places a w x h panel after the previous one, wrapping at Grafana's
// 24 columns.
func (b *board) pos(w, h uint32) dashboard.GridPos {
	if b.x+w > 24 {
		b.x, b.y, b.rowH = 0, b.y+b.rowH, 0
	}
	p := dashboard.GridPos{X: b.x, Y: b.y, W: w, H: h}
	b.x += w
	b.rowH = max(b.rowH, h)
	return p
}

func targets(qs []query) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], len(qs))
	for i, q := range qs {
		t := prometheus.NewDataqueryBuilder().
			Expr(q.expr).
			LegendFormat(q.legend).
			RefId(string(rune('A' + i))).
			Datasource(datasource)
		if q.exemplar {
			t.Exemplar(true)
		}
		if q.heatmap {
			t.Format(prometheus.PromQueryFormatHeatmap)
		}
		out[i] = t
	}
	return out
}

// timeseries adds a time series panel, w of 24 columns wide.
func (b *board) timeseries(w uint32, title, description, unit string, qs ...query) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().
		Id(b.id()).
		Title(title).
		Description(description).
		Unit(unit).
		Datasource(datasource).
		GridPos(b.pos(w, 8)).
		FillOpacity(10).
		Legend(common.NewVizLegendOptionsBuilder().
			DisplayMode(common.LegendDisplayModeTable).
			Placement(common.LegendPlacementBottom).
			ShowLegend(true).
			Calcs([]string{"lastNotNull", "max"}))
	for _, t := range targets(qs) {
		p.WithTarget(t)
	}
	return p
}

// thresholds draws steps (green below the first) as dashed lines and
// areas on a time series panel: for values that are bad when high.
func thresholds(p *timeseries.PanelBuilder, steps ...step) *timeseries.PanelBuilder {
	return drawSteps(p, "green", steps)
}

// floor draws one threshold below which values are bad (red), for
// success ratios and time left.
func floor(p *timeseries.PanelBuilder, value float64) *timeseries.PanelBuilder {
	return drawSteps(p, "red", []step{{value, "green"}})
}

func drawSteps(p *timeseries.PanelBuilder, base string, steps []step) *timeseries.PanelBuilder {
	ts := []dashboard.Threshold{{Color: base}}
	for _, s := range steps {
		ts = append(ts, dashboard.Threshold{Value: cog.ToPtr(s.value), Color: s.color})
	}
	return p.Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(ts)).
		ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashedAndArea))
}

type step struct {
	value float64
	color string
}

// heatmap adds a heatmap of a histogram's buckets.
func (b *board) heatmap(w uint32, title, description, unit string, qs ...query) *heatmap.PanelBuilder {
	p := heatmap.NewPanelBuilder().
		Id(b.id()).
		Title(title).
		Description(description).
		Unit(unit).
		Datasource(datasource).
		GridPos(b.pos(w, 8)).
		Calculate(false)
	for _, t := range targets(qs) {
		p.WithTarget(t)
	}
	return p
}

// stat adds a single-value panel.
func (b *board) stat(w uint32, title, description, unit string, qs ...query) *stat.PanelBuilder {
	p := stat.NewPanelBuilder().
		Id(b.id()).
		Title(title).
		Description(description).
		Unit(unit).
		Datasource(datasource).
		GridPos(b.pos(w, 4)).
		GraphMode(common.BigValueGraphModeArea)
	for _, t := range targets(qs) {
		p.WithTarget(t)
	}
	return p
}

func (b *board) add(p cog.Builder[dashboard.Panel]) { b.db.WithPanel(p) }
