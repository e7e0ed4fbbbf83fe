package idmetrics_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/idmetrics"
)

// idClock is the system clock with a wall-clock offset the test steps.
type idClock struct{ off atomic.Int64 }

func (c *idClock) Wall() time.Time     { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *idClock) Mono() time.Duration { return time.Duration(time.Now().UnixNano()) }

// metricValue returns the value of the series name{label=value} (counter, gauge, or a
// histogram's sample count), or -1 when it is missing.
func metricValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && !hasLabel(m, label, value) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return -1
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func TestGenerator_CountsGeneratedExhaustedAndBackwards(t *testing.T) {
	reg := prometheus.NewRegistry()
	clk := &idClock{}
	var gen *snowflake.Generator
	ig, err := idmetrics.New(func() (int64, error) { return gen.NextID(context.Background()) }, reg,
		idmetrics.WithConstLabels(prometheus.Labels{"service": "auth"}),
		idmetrics.WithLifetimeEnd(snowflake.DefaultLayout.End(snowflake.DefaultEpoch)))
	if err != nil {
		t.Fatal(err)
	}
	gen, err = snowflake.New(1, snowflake.WithLayout(snowflake.LayoutJSSafe), snowflake.WithClock(clk), snowflake.WithHooks(ig.SnowflakeHooks()))
	if err != nil {
		t.Fatal(err)
	}
	for range 10000 {
		if _, err := ig.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if v := metricValue(t, reg, "lockgov_id_generated_total", "service", "auth"); v != 10000 {
		t.Fatalf("generated_total = %v, want 10000", v)
	}
	if v := metricValue(t, reg, "lockgov_id_sequence_exhausted_total", "", ""); v < 1 {
		t.Fatalf("sequence_exhausted_total = %v, want >= 1 after 10000 IDs at 128/ms", v)
	}
	clk.off.Add(int64(-time.Second))
	time.Sleep(2 * time.Millisecond)
	if _, err := ig.Next(); !errors.Is(err, snowflake.ErrClockBackwards) {
		t.Fatalf("after a 1s step back: %v", err)
	}
	if v := metricValue(t, reg, "lockgov_id_clock_backwards_total", "action", "refuse"); v != 1 {
		t.Fatalf("clock_backwards_total{action=refuse} = %v, want 1 (counted once, by the hook)", v)
	}
	if v := metricValue(t, reg, "lockgov_id_clock_backwards_seconds", "", ""); v != 1 {
		t.Fatalf("clock_backwards_seconds count = %v, want 1", v)
	}
	if v := metricValue(t, reg, "lockgov_id_lifetime_remaining_seconds", "", ""); v < 60*365*24*3600 {
		t.Fatalf("lifetime_remaining_seconds = %v, want > 60 years", v)
	}
	if v := metricValue(t, reg, "lockgov_id_worker_lease", "state", "none"); v != 1 {
		t.Fatalf("worker_lease{state=none} = %v, want 1", v)
	}
}

func TestGenerator_ClassifiesErrorsOfAnyGenerator(t *testing.T) {
	reg := prometheus.NewRegistry()
	var fail error // Next is called from this goroutine only
	ig, err := idmetrics.New(func() (int64, error) {
		if fail != nil {
			return 0, fail
		}
		return 42, nil
	}, reg)
	if err != nil {
		t.Fatal(err)
	}
	ig.SetWorkerLease(idmetrics.WorkerLeaseHeld)
	fail = fmt.Errorf("my generator: %w", snowflake.ErrWorkerLeaseLost)
	if _, err := ig.Next(); err == nil {
		t.Fatal("want an error")
	}
	if v := metricValue(t, reg, "lockgov_id_worker_lease", "state", "lost"); v != 1 {
		t.Fatalf("worker_lease{state=lost} = %v, want 1", v)
	}
	fail = &snowflake.ClockBackwardsError{Offset: 40 * time.Millisecond}
	_, _ = ig.Next()
	if v := metricValue(t, reg, "lockgov_id_clock_backwards_total", "action", "refuse"); v != 1 {
		t.Fatalf("clock_backwards_total{action=refuse} = %v, want 1", v)
	}
	fail = errors.New("other")
	_, _ = ig.Next()
	fail = nil
	if id, err := ig.Next(); err != nil || id != 42 {
		t.Fatalf("Next = %d, %v", id, err)
	}
	if v := metricValue(t, reg, "lockgov_id_worker_lease", "state", "held"); v != 1 {
		t.Fatalf("worker_lease{state=held} after success = %v, want 1", v)
	}
}

func TestNew_RefusesNilAndInconsistentLabelsAndSharesEqualOnes(t *testing.T) {
	reg := prometheus.NewRegistry()
	next := func() (int64, error) { return 1, nil }
	if _, err := idmetrics.New(nil, reg); err == nil {
		t.Fatal("nil generator accepted")
	}
	if _, err := idmetrics.New(next, nil); err == nil {
		t.Fatal("nil registerer accepted")
	}
	a, err := idmetrics.New(next, reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := idmetrics.New(next, reg) // same labels: shares a's series
	if err != nil {
		t.Fatalf("a second generator with the same labels did not share the registry: %v", err)
	}
	_, _ = a.Next()
	_, _ = b.Next()
	if got := metricValue(t, reg, "lockgov_id_generated_total", "", ""); got != 2 {
		t.Fatalf("lockgov_id_generated_total = %v, want 2 (shared)", got)
	}
	if _, err := idmetrics.New(next, reg, idmetrics.WithConstLabels(prometheus.Labels{"service": "b"})); err == nil {
		// Different const labels on the same names are allowed by client_golang only if the
		// label names match; the first set had none, so this must fail.
		t.Fatal("inconsistent label names registered")
	}
}

func ExampleNew() {
	reg := prometheus.NewRegistry() // yours, never the global one
	var g *snowflake.Generator
	ig, err := idmetrics.New(func() (int64, error) { return g.NextID(context.Background()) }, reg,
		idmetrics.WithConstLabels(prometheus.Labels{"service": "auth"}),
		idmetrics.WithLifetimeEnd(snowflake.DefaultLayout.End(snowflake.DefaultEpoch)))
	if err != nil {
		panic(err)
	}
	g, _ = snowflake.New(7, snowflake.WithHooks(ig.SnowflakeHooks()))
	id, err := ig.Next()
	fmt.Println(id > 0, err)
	// Output: true <nil>
}
