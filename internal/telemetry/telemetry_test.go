package telemetry

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

var update = flag.Bool("update", false, "rewrite the README's metric table from Table")

var (
	nameRE  = regexp.MustCompile(`^lockgov_[a-z][a-z0-9_]*[a-z0-9]$`)
	labelRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// TestTable_FollowsPrometheusNaming holds the naming rules of
// client_golang and the mixins for every row: lockgov_ prefix, _total on
// counters and only on counters, base units, bounded label names, buckets
// on histograms only, fixed values only for labels the row has.
func TestTable_FollowsPrometheusNaming(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range Table {
		if seen[m.Name] {
			t.Errorf("%s is in the table twice", m.Name)
		}
		seen[m.Name] = true
		if !nameRE.MatchString(m.Name) {
			t.Errorf("%s: not a lockgov_<noun>_<unit> name", m.Name)
		}
		if (m.Kind == Counter) != strings.HasSuffix(m.Name, "_total") {
			t.Errorf("%s: a %s; counters and only counters end in _total", m.Name, m.Kind)
		}
		if strings.Contains(m.Name, "_milliseconds") || strings.Contains(m.Name, "_ms") {
			t.Errorf("%s: use base units (seconds)", m.Name)
		}
		if (m.Kind == Histogram) != (len(m.Buckets) > 0) {
			t.Errorf("%s: a %s with %d buckets", m.Name, m.Kind, len(m.Buckets))
		}
		if !slices.IsSorted(m.Buckets) {
			t.Errorf("%s: buckets not sorted", m.Name)
		}
		if m.Help == "" || m.Component == "" {
			t.Errorf("%s: needs help and a component", m.Name)
		}
		for _, l := range m.Labels {
			if !labelRE.MatchString(l) || l == "key" || l == "token" {
				t.Errorf("%s: label %q (raw keys and tokens never become labels)", m.Name, l)
			}
		}
		for l := range m.Values {
			if !slices.Contains(m.Labels, l) {
				t.Errorf("%s: values for label %q it does not have", m.Name, l)
			}
		}
		if got, ok := Lookup(m.Name); !ok || got.Name != m.Name {
			t.Errorf("Lookup(%s) = %v, %v", m.Name, got.Name, ok)
		}
	}
	if _, ok := Lookup("lockgov_no_such_metric"); ok {
		t.Error("Lookup found a metric that is not in the table")
	}
}

// TestREADME_MetricTableIsTheTable holds that the README lists exactly the
// metrics in Table (go test ./internal/telemetry -update rewrites it).
func TestREADME_MetricTableIsTheTable(t *testing.T) {
	const path = "../../README.md"
	const begin, end = "<!-- metrics:begin (generated from internal/telemetry; go test ./internal/telemetry -update) -->\n", "<!-- metrics:end -->"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	i, j := strings.Index(readme, begin), strings.Index(readme, end)
	if i < 0 || j < i {
		t.Fatalf("README.md has no metric table between %q and %q", begin, end)
	}
	want := readme[:i+len(begin)] + Markdown() + readme[j:]
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if readme != want {
		t.Errorf("README.md's metric table is stale: run go test ./internal/telemetry -update\nwant:\n%s", Markdown())
	}
	// Every lockgov_ name the README mentions anywhere is a metric in the table.
	for _, name := range regexp.MustCompile(`lockgov_[a-z0-9_]+`).FindAllString(readme, -1) {
		if m, ok := Lookup(name); !ok || m.Planned != "" {
			t.Errorf("README.md mentions %s, which is not a metric lockgov exports", name)
		}
	}
}

func TestRegister_SharesAnEqualCollectorAndRefusesAConflict(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	var err error
	a := LockLostTotal.CounterVec(nil)
	Register(reg, &a, &err)
	b := LockLostTotal.CounterVec(nil)
	Register(reg, &b, &err)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatal("the second registration did not share the first collector")
	}
	b.WithLabelValues("redis", "lock:x").Inc()
	if got := testutil.ToFloat64(a.WithLabelValues("redis", "lock:x")); got != 1 {
		t.Fatalf("shared counter = %v, want 1", got)
	}

	// Same name, other labels: an error, kept, and later calls do nothing.
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: LockLostTotal.Name, Help: LockLostTotal.Help}, []string{"other"})
	Register(reg, &c, &err)
	if err == nil {
		t.Fatal("a conflicting collector registered without an error")
	}
	first := err
	d := LockHeld.GaugeVec(nil)
	Register(reg, &d, &err)
	if err != first {
		t.Fatalf("a later Register replaced the first error: %v", err)
	}

	var none error
	e := LockHeld.GaugeVec(nil)
	Register(nil, &e, &none) // nil registry: kept, exported nowhere
	if none != nil {
		t.Fatal(none)
	}
}

func TestChildren_BuildsEachKeyOnce(t *testing.T) {
	built := map[string]int{}
	c := Children[string, int]{New: func(k string) *int { built[k]++; n := len(k); return &n }}
	for range 3 {
		if *c.Get("ab") != 2 || *c.Get("abc") != 3 {
			t.Fatal("wrong child")
		}
	}
	if built["ab"] != 1 || built["abc"] != 1 {
		t.Fatalf("built %v, want each once", built)
	}
}

func TestRows_PanicWhenUsedAsTheWrongType(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a histogram row made a counter")
		}
	}()
	LockHoldDuration.CounterVec(nil)
}

// TestTimed_OneExemplarPerBucketPerInterval: the first sampled observation
// of a bucket sets its exemplar; later ones within ExemplarInterval count
// but leave it; after the interval the next one replaces it; a bucket of
// its own (a slow acquire) gets its exemplar at once.
func TestTimed_OneExemplarPerBucketPerInterval(t *testing.T) {
	h := LockHoldDuration.HistogramVec(nil)
	child := h.WithLabelValues("redis", "p")
	tm := NewTimed(child, LockHoldDuration.Buckets)
	var clock int64
	tm.now = func() int64 { return clock }
	exemplars := func() map[float64]string {
		var m dto.Metric
		if err := child.(prometheus.Metric).Write(&m); err != nil {
			t.Fatal(err)
		}
		out := map[float64]string{}
		for _, b := range m.GetHistogram().GetBucket() {
			if e := b.GetExemplar(); e != nil {
				out[b.GetUpperBound()] = e.GetLabel()[0].GetValue()
			}
		}
		return out
	}
	tm.Observe(3*time.Millisecond, "trace-a") // bucket le=0.005
	clock += int64(ExemplarInterval) / 2
	tm.Observe(4*time.Millisecond, "trace-b") // same bucket, within the interval
	tm.Observe(2*time.Second, "trace-slow")   // bucket le=5
	tm.Observe(4*time.Millisecond, "")        // not sampled
	if got, want := exemplars(), map[float64]string{0.005: "trace-a", 5: "trace-slow"}; !maps.Equal(got, want) {
		t.Fatalf("exemplars %v, want %v", got, want)
	}
	clock += int64(ExemplarInterval)
	tm.Observe(4*time.Millisecond, "trace-c")
	if got := exemplars()[0.005]; got != "trace-c" {
		t.Fatalf("after the interval the bucket's exemplar is %q, want trace-c", got)
	}
	var m dto.Metric
	if err := child.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetHistogram().GetSampleCount(); got != 5 {
		t.Fatalf("%d samples, want 5: a gated exemplar must still count", got)
	}
}

// TestKeyless_TheQuotedKeyGoesTheRestStays: a key named with %q in an error
// is replaced, wherever it is wrapped; the same characters unquoted (a
// pattern, a substring of a word) are left alone.
func TestKeyless_TheQuotedKeyGoesTheRestStays(t *testing.T) {
	err := fmt.Errorf("outer: %w", fmt.Errorf("acquire %q: %w", `lock:order:"42"`, errors.New("lock not acquired")))
	got := Keyless(err, `lock:order:"42"`).Error()
	if want := "outer: acquire <key>: lock not acquired"; got != want {
		t.Errorf("Keyless = %q, want %q", got, want)
	}
	if got := Keyless(errors.New(`order of "a" in lock:a`), "a").Error(); got != `order of <key> in lock:a` {
		t.Errorf("Keyless of a one-letter key = %q", got)
	}
}
