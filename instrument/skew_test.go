package instrument_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/policy"
)

// ttlProbe is a Locker that records the TTL Govern hands to the backend and
// acquires nothing.
func ttlProbe(got *time.Duration) instrument.Locker {
	return instrument.LockerFunc(func(_ context.Context, _ string, opts ...instrument.AcquireOption) (instrument.Lease, error) {
		cfg, err := instrument.ApplyAcquireOptions(opts...)
		*got = cfg.TTL
		if err != nil {
			return nil, err
		}
		return nil, instrument.ErrNotAcquired
	})
}

// In the degrade tier a TTL is scaled by the policy's factor, but never below
// the pattern's min_ttl (nor below the 3 ms a backend accepts), and never
// above what the caller asked for.
func TestGovern_SkewDegradedTTLStaysWithinThePolicysMinimum(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse("test.yaml", []byte(`
version: 1
patterns:
  - pattern: "lock:floor:{id}"
    ttl: 6s
    min_ttl: 5s
  - pattern: "lock:tiny:{id}"
    mode: audit
    ttl: 4ms
    min_ttl: 1ms
  - pattern: "lock:below:{id}"
    mode: audit
    ttl: 6s
    min_ttl: 5s
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		ttl  time.Duration // 0: the pattern's
		want time.Duration
	}{
		{"lock:floor:1", 0, 5 * time.Second},                // 6s x 0.7 = 4.2s, below min_ttl 5s
		{"lock:floor:1", 10 * time.Second, 7 * time.Second}, // plain x 0.7
		{"lock:tiny:1", 0, 3 * time.Millisecond},            // 2.8ms is below what a backend accepts
		{"lock:below:1", 2 * time.Second, 2 * time.Second},  // already below min_ttl (audit): not shortened further
		{"lock:other:1", 100 * time.Millisecond, 70 * time.Millisecond},
	} {
		var got time.Duration
		g, err := instrument.NewGoverned(ttlProbe(&got),
			instrument.WithPolicy(p),
			instrument.WithRegisterer(prometheus.NewRegistry()),
			instrument.WithLogger(slog.New(slog.DiscardHandler)),
			instrument.WithSkewSource(func() (time.Duration, bool) { return 300 * time.Millisecond, true }))
		if err != nil {
			t.Fatal(err)
		}
		var opts []instrument.AcquireOption
		if tc.ttl > 0 {
			opts = append(opts, instrument.WithTTL(tc.ttl))
		}
		_, _ = g.Acquire(withTimeout(t, 5*time.Second), tc.key, opts...)
		if got != tc.want {
			t.Errorf("%s TTL %v in the degrade tier: backend got %v, want %v", tc.key, tc.ttl, got, tc.want)
		}
	}
}
