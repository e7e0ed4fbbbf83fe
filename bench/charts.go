package main

import (
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var chartFiles = []struct{ file, title string }{
	{"throughput.png", "Uncontended acquire+release pairs/s per library"},
	{"wait-cdf.png", "Wait-time CDF under contention"},
	{"per-contender.png", "Acquisitions per contender under contention"},
}

// chartLabel is a library's name on an axis.
var chartLabel = map[string]string{
	nameRaw: "raw SETNX+EVALSHA", nameBare: "lockgov bare", nameGoverned: "lockgov+Govern", nameGovNoTr: "Govern, no tracer", nameRawSpans: "raw + 2 spans",
	nameBSM: "bsm/redislock", nameRedsync: "redsync", nameEtcdMu: "etcd Mutex", nameEtcdlock: "lockgov etcdlock",
	nameBSMLinear: "bsm linear", nameBSMExp: "bsm exp", nameRedsyncC: "redsync", nameWait: "lockgov wait",
	nameFair: "lockgov Fair", nameFloorC: "floor (no lock)",
}

func label(name string) string {
	if l, ok := chartLabel[name]; ok {
		return l
	}
	return name
}

func renderCharts(r *results, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if len(r.uncontended) > 0 {
		if err := throughputChart(r, filepath.Join(dir, chartFiles[0].file)); err != nil {
			return fmt.Errorf("throughput chart: %w", err)
		}
	}
	if len(r.contended) > 0 {
		if err := cdfChart(r, filepath.Join(dir, chartFiles[1].file)); err != nil {
			return fmt.Errorf("wait CDF chart: %w", err)
		}
		if err := perContenderChart(r, filepath.Join(dir, chartFiles[2].file)); err != nil {
			return fmt.Errorf("per-contender chart: %w", err)
		}
	}
	return nil
}

func throughputChart(r *results, path string) error {
	p := plot.New()
	p.Title.Text = chartFiles[0].title
	p.X.Label.Text = "acquire+release pairs/s (median over rounds)"
	var names []string
	for _, x := range r.uncontended {
		if x.goroutines == 1 {
			names = append(names, x.name)
		}
	}
	// Bars bottom-up in table order: reverse so the first library is on top.
	for i, j := 0, len(names)-1; i < j; i, j = i+1, j-1 {
		names[i], names[j] = names[j], names[i]
	}
	w := vg.Points(9)
	for k, g := range []int{1, 16} {
		vals := make(plotter.Values, len(names))
		for i, n := range names {
			if x := r.lockRowFor(n, g); x != nil {
				vals[i] = x.opsPerSec
			}
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Horizontal = true
		bars.LineStyle.Width = 0
		bars.Color = plotutil.Color(k)
		bars.Offset = (0.5 - vg.Length(k)) * w // 1 goroutine above, 16 below
		p.Add(bars)
		p.Legend.Add(fmt.Sprintf("%d goroutine(s)", g), bars)
	}
	labels := make([]string, len(names))
	for i, n := range names {
		labels[i] = label(n)
	}
	p.NominalY(labels...)
	// Room on the right for the legend.
	top := 0.0
	for _, x := range r.uncontended {
		top = max(top, x.opsPerSec)
	}
	p.X.Min, p.X.Max = 0, top*1.35
	p.X.Tick.Marker = kTicks{}
	p.Legend.Top = false // bottom right, beside the short etcd bars
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}

func cdfChart(r *results, path string) error {
	p := plot.New()
	p.Title.Text = chartFiles[1].title + fmt.Sprintf(" (%d contenders, %v holds)", contenders, hold)
	p.X.Label.Text = "wait (ms, log scale)"
	p.Y.Label.Text = "fraction of acquisitions"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	for i, x := range r.contended {
		if len(x.waits) == 0 {
			continue
		}
		const points = 150
		n := len(x.waits)
		var xys plotter.XYs
		for k := 0; k < points; k++ {
			idx := min(n-1, k*n/points)
			xys = append(xys, plotter.XY{X: max(ms(x.waits[idx]), 0.01), Y: float64(idx+1) / float64(n)})
		}
		xys = append(xys, plotter.XY{X: max(ms(x.waits[n-1]), 0.01), Y: 1})
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / 4)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(label(x.name), l)
	}
	// Room on the right for the legend: the axis runs a decade and a half past the longest wait.
	longest := 0.0
	for _, x := range r.contended {
		if len(x.waits) > 0 {
			longest = max(longest, ms(x.waits[len(x.waits)-1]))
		}
	}
	p.X.Max = longest * 40
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.YOffs = vg.Points(20)
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func perContenderChart(r *results, path string) error {
	p := plot.New()
	p.Title.Text = chartFiles[2].title + " (median round; 1.0 = an equal share)"
	p.Y.Label.Text = "acquisitions / mean per contender"
	var labels []string
	for i, x := range r.contended {
		labels = append(labels, label(x.name))
		total := 0
		for _, c := range x.perContender {
			total += c
		}
		if total == 0 {
			continue
		}
		mean := float64(total) / float64(len(x.perContender))
		var xys plotter.XYs
		for k, c := range x.perContender {
			// Spread the contenders a little so equal counts stay visible.
			xys = append(xys, plotter.XY{X: float64(i) + 0.05*float64(k-len(x.perContender)/2), Y: float64(c) / mean})
		}
		s, err := plotter.NewScatter(xys)
		if err != nil {
			return err
		}
		s.GlyphStyle.Color = plotutil.Color(i)
		s.GlyphStyle.Shape = draw.CircleGlyph{}
		s.GlyphStyle.Radius = vg.Points(3)
		p.Add(s)
	}
	p.NominalX(labels...)
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	return p.Save(8*vg.Inch, 4*vg.Inch, path)
}

// kTicks labels a count axis in thousands.
type kTicks struct{}

func (kTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = fmt.Sprintf("%gk", ts[i].Value/1000)
		}
	}
	return ts
}
