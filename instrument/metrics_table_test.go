package instrument_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/telemetry"
)

// TestGovern_ExportsExactlyTheTablesLockMetrics holds the one home of metric
// names: every lock metric Govern registers is a row of the telemetry table
// with the row's type and labels, and every lock row is registered.
func TestGovern_ExportsExactlyTheTablesLockMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	g, err := instrument.NewGoverned(instrument.LockerFunc(func(ctx context.Context, key string, _ ...instrument.AcquireOption) (instrument.Lease, error) {
		return nil, instrument.ErrNotAcquired
	}), instrument.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = g.Acquire(ctx, "lock:x:1", instrument.FailFast())                  // makes the per-pattern series exist
	_, _ = g.Acquire(context.Background(), "lock:x:1", instrument.FailFast()) // and a timeout-rule violation
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
		row, ok := telemetry.Lookup(mf.GetName())
		if !ok {
			t.Errorf("Govern exports %s, which is not in the metric table", mf.GetName())
			continue
		}
		if want := row.Kind.String(); mf.GetType().String() != map[string]string{"counter": "COUNTER", "gauge": "GAUGE", "histogram": "HISTOGRAM"}[want] {
			t.Errorf("%s: type %s, table says %s", row.Name, mf.GetType(), want)
		}
		for _, m := range mf.GetMetric() {
			var names []string
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
			}
			want := slices.Clone(row.Labels)
			slices.Sort(want)
			if !slices.Equal(names, want) {
				t.Errorf("%s: labels %v, table says %v", row.Name, names, row.Labels)
			}
		}
	}
	for _, row := range telemetry.Table {
		if row.Component == "lock" && !got[row.Name] {
			t.Errorf("table row %s is not exported by Govern", row.Name)
		}
	}
}
