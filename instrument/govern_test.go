package instrument_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/policy"
)

func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue metric
				}
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
	return 0
}

func TestGovern_TimeoutRule_EnforceAuditOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode       string
		refused    bool
		violations float64
	}{
		{"enforce", true, 1},
		{"audit", false, 1},
		{"off", false, 0},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			var logs bytes.Buffer
			f := newFixture(t, instrument.WithPolicy(quotaPolicy(t, tc.mode)),
				instrument.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			lease, err := f.locker.Acquire(context.Background(), "lock:quota:42")
			if tc.refused {
				if !errors.Is(err, instrument.ErrPolicy) || !strings.Contains(err.Error(), "no deadline") {
					t.Fatalf("err = %v, want ErrPolicy naming the missing deadline", err)
				}
				if n := f.client.DBSize(context.Background()).Val(); n != 0 {
					t.Fatalf("refused call wrote %d keys", n)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if err := lease.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			got := counter(t, f.reg, "lockgov_policy_violations_total", map[string]string{"rule": "timeout", "mode": tc.mode})
			if got != tc.violations {
				t.Fatalf("violations = %v, want %v", got, tc.violations)
			}
			if tc.mode == "audit" && !strings.Contains(logs.String(), "rule=timeout") {
				t.Fatalf("audit mode logged nothing: %q", logs.String())
			}
		})
	}
}

func TestGovern_TTLAbovePolicyMaximumRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, instrument.WithPolicy(quotaPolicy(t, "enforce")))
	ctx := withTimeout(t, 5*time.Second)
	_, err := f.locker.Acquire(ctx, "lock:quota:42", instrument.WithTTL(2*time.Minute))
	if !errors.Is(err, instrument.ErrPolicy) || !strings.Contains(err.Error(), "TTL 2m0s") {
		t.Fatalf("err = %v, want ErrPolicy naming the TTL", err)
	}
	if _, err := f.locker.Acquire(ctx, "lock:quota:42", instrument.WithTTL(0)); !errors.Is(err, instrument.ErrInvalidOption) {
		t.Fatalf("TTL 0: %v, want ErrInvalidOption", err)
	}
	if n := f.client.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("refused calls wrote %d keys", n)
	}
	// The pattern's default TTL applies when the caller sets none.
	lease, err := f.locker.Acquire(ctx, "lock:quota:42")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	if pttl := f.client.PTTL(ctx, "lock:quota:42").Val(); pttl > 10*time.Second || pttl < 9*time.Second {
		t.Fatalf("PTTL %v, want the pattern's 10s", pttl)
	}
}

func TestGovern_NilLockerIsAnError(t *testing.T) {
	t.Parallel()
	if _, err := instrument.NewGoverned(nil); !errors.Is(err, instrument.ErrInvalidOption) {
		t.Fatalf("NewGoverned(nil) = %v", err)
	}
	_, err := instrument.Govern(nil).Acquire(context.Background(), "k")
	if !errors.Is(err, instrument.ErrInvalidOption) || !strings.Contains(err.Error(), "nil Locker") {
		t.Fatalf("Govern(nil).Acquire = %v", err)
	}
}

// TestGovern_SpansMetricsAndNoTokenLeak checks the trace shape, the metric
// families, the exemplar, and that neither the owner token nor the raw key
// appears in any span attribute or exported metric.
func TestGovern_SpansMetricsAndNoTokenLeak(t *testing.T) {
	t.Parallel()
	f := newFixture(t, instrument.WithPolicy(quotaPolicy(t, "enforce")))
	ctx := withTimeout(t, 5*time.Second)
	ctx, parent := f.tp.Tracer("test").Start(ctx, "deduct quota")

	lease, err := f.locker.Acquire(ctx, "lock:quota:987654", instrument.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	value := f.client.Get(ctx, "lock:quota:987654").Val()
	token := strings.Fields(value)[0]
	if len(token) < 16 {
		t.Fatalf("token %q too short", token)
	}
	if !strings.Contains(value, parent.SpanContext().TraceID().String()) {
		t.Errorf("lock value %q lacks the caller's trace id", value)
	}
	if !strings.Contains(value, `"traceparent"`) {
		t.Errorf("lock value %q lacks the propagated trace context", value)
	}
	for counter(t, f.reg, "lockgov_lock_renewals_total", map[string]string{"result": "ok"}) < 1 {
		if ctx.Err() != nil {
			t.Fatal("the watchdog never renewed")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not waiting for time to pass
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	parent.End()

	byName := map[string]bool{}
	for _, s := range f.spans.Ended() {
		byName[s.Name()] = true
		if s.Name() == "acquire lock" || s.Name() == "release lock" {
			if s.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("%s is not a child of the caller's span", s.Name())
			}
			if s.SpanKind() != trace.SpanKindClient {
				t.Errorf("%s kind %v", s.Name(), s.SpanKind())
			}
			want := map[attribute.Key]string{"lock.key_pattern": "lock:quota:{merchant_id}", "lock.backend": "redis", "db.system.name": "redis"}
			have := map[attribute.Key]bool{}
			for _, kv := range s.Attributes() {
				have[kv.Key] = true
				if w, ok := want[kv.Key]; ok && kv.Value.Emit() != w {
					t.Errorf("%s %s = %q, want %q", s.Name(), kv.Key, kv.Value.Emit(), w)
				}
			}
			for k := range want {
				if !have[k] {
					t.Errorf("%s lacks %s", s.Name(), k)
				}
			}
			if s.Name() == "acquire lock" {
				for _, k := range []attribute.Key{"lock.wait_strategy", "lock.attempts", "lock.fence"} {
					if !have[k] {
						t.Errorf("acquire lock lacks %s", k)
					}
				}
			}
		}
		for _, kv := range s.Attributes() {
			if v := kv.Value.Emit(); strings.Contains(v, token) || strings.Contains(v, "987654") {
				t.Errorf("span %s attribute %s carries the token or raw key: %q", s.Name(), kv.Key, v)
			}
		}
		for _, ev := range s.Events() {
			for _, kv := range ev.Attributes {
				if strings.Contains(kv.Value.Emit(), token) {
					t.Errorf("span event %s carries the token", ev.Name)
				}
			}
		}
	}
	if !byName["acquire lock"] || !byName["release lock"] {
		t.Fatalf("spans %v, want acquire lock and release lock", byName)
	}
	var renewed bool
	for _, s := range f.spans.Ended() {
		if s.Name() == "deduct quota" {
			for _, ev := range s.Events() {
				renewed = renewed || ev.Name == "lock renewed"
			}
		}
	}
	if !renewed {
		t.Error("no renewal event on the caller's span")
	}

	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var scrape bytes.Buffer
	enc := expfmt.NewEncoder(&scrape, expfmt.NewFormat(expfmt.TypeOpenMetrics))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	text := scrape.String()
	for _, name := range []string{
		"lockgov_lock_acquire_total", "lockgov_lock_acquire_duration_seconds", "lockgov_lock_hold_duration_seconds",
		"lockgov_lock_held", "lockgov_lock_waiters", "lockgov_lock_renewals_total", "lockgov_lock_lost_total",
		"lockgov_lease_leaked_total",
	} {
		if !strings.Contains(text, name) {
			t.Errorf("scrape lacks %s", name)
		}
	}
	if strings.Contains(text, token) || strings.Contains(text, "987654") {
		t.Fatalf("scrape carries the token or the raw key:\n%s", text)
	}
	if !strings.Contains(text, `trace_id="`+parent.SpanContext().TraceID().String()+`"`) {
		t.Errorf("no trace_id exemplar in the OpenMetrics scrape:\n%s", text)
	}
	labels := map[string]string{"backend": "redis", "lock_pattern": "lock:quota:{merchant_id}"}
	if v := counter(t, f.reg, "lockgov_lock_acquire_total", map[string]string{"result": "acquired", "lock_pattern": "lock:quota:{merchant_id}"}); v != 1 {
		t.Errorf("acquired = %v", v)
	}
	if v := counter(t, f.reg, "lockgov_lock_held", labels); v != 0 {
		t.Errorf("held after release = %v", v)
	}
	if v := counter(t, f.reg, "lockgov_lock_renewals_total", map[string]string{"result": "ok"}); v < 1 {
		t.Errorf("renewals ok = %v", v)
	}
	if v := counter(t, f.reg, "lockgov_lock_hold_duration_seconds", labels); v != 1 {
		t.Errorf("hold observations = %v", v)
	}
}

func TestGovern_UndeclaredKeysAreNormalisedAndCapped(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := withTimeout(t, 5*time.Second)
	lease, err := f.locker.Acquire(ctx, "lock:order:12345")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	if v := counter(t, f.reg, "lockgov_lock_held", map[string]string{"lock_pattern": "lock:order:{id}"}); v != 1 {
		t.Fatalf("held{lock_pattern=lock:order:{id}} = %v", v)
	}
}

func TestGovern_ReentrantThroughContext(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := withTimeout(t, 5*time.Second)
	outer, err := f.locker.Acquire(ctx, "lock:r")
	if err != nil {
		t.Fatal(err)
	}
	inctx, cancel := context.WithTimeout(outer.Context(), time.Second)
	defer cancel()
	inner, err := f.locker.Acquire(inctx, "lock:r", instrument.FailFast())
	if err != nil {
		t.Fatalf("re-entry through the lease's context: %v", err)
	}
	if inner.Fence() != outer.Fence() {
		t.Fatalf("re-entered fence %d != %d", inner.Fence(), outer.Fence())
	}
	// Without the lease in the context, the same key is someone else's.
	if _, err := f.locker.Acquire(ctx, "lock:r", instrument.FailFast()); !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("acquire without the lease in ctx: %v, want ErrNotAcquired", err)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if f.client.Exists(ctx, "lock:r").Val() != 1 {
		t.Fatal("inner Release freed the lock the outer still holds")
	}
	if err := inner.Release(ctx); !errors.Is(err, instrument.ErrNotHeld) {
		t.Fatalf("second inner Release = %v, want ErrNotHeld", err)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if f.client.Exists(ctx, "lock:r").Val() != 0 {
		t.Fatal("outer Release left the lock behind")
	}
	if v := counter(t, f.reg, "lockgov_lock_acquire_total", map[string]string{"result": "reentered"}); v != 1 {
		t.Fatalf("reentered = %v", v)
	}
}

func TestDo_PanicReleasesAndRepanics(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := withTimeout(t, 5*time.Second)
	defer func() {
		if r := recover(); r != "boom" {
			t.Fatalf("recovered %v, want boom", r)
		}
		if f.client.Exists(ctx, "lock:p").Val() != 0 {
			t.Fatal("lock still held after the panic")
		}
	}()
	_ = instrument.Do(ctx, f.locker, "lock:p", func(ctx context.Context) error {
		// Nested Do on the same key re-enters instead of deadlocking.
		return instrument.Do(ctx, f.locker, "lock:p", func(context.Context) error { panic("boom") }, instrument.FailFast())
	})
	t.Fatal("Do returned instead of re-panicking")
}

func TestDo_FnContextCancelledOnLoss(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := withTimeout(t, 10*time.Second)
	err := instrument.Do(ctx, f.locker, "lock:l", func(ctx context.Context) error {
		f.client.Del(ctx, "lock:l") // someone removes the lock under us
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), instrument.ErrLockLost) {
			t.Errorf("fn ctx cause = %v, want ErrLockLost", context.Cause(ctx))
		}
		return nil
	}, instrument.WithTTL(300*time.Millisecond))
	if !errors.Is(err, instrument.ErrLockLost) {
		t.Fatalf("Do = %v, want ErrLockLost (fn ran past the loss)", err)
	}
	if v := counter(t, f.reg, "lockgov_lock_lost_total", nil); v != 1 {
		t.Fatalf("lost = %v", v)
	}
}

func TestDo_ReturnsFnErrorAndReleases(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := withTimeout(t, 5*time.Second)
	want := errors.New("quota not enough")
	if err := instrument.Do(ctx, f.locker, "lock:e", func(context.Context) error { return want }); !errors.Is(err, want) {
		t.Fatalf("Do = %v", err)
	}
	if f.client.Exists(ctx, "lock:e").Val() != 0 {
		t.Fatal("lock left behind")
	}
}

func TestGovern_LeakedLeaseCountedLoggedReleased(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	f := newFixture(t, instrument.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	ctx := withTimeout(t, 10*time.Second)
	func() {
		if _, err := f.locker.Acquire(ctx, "lock:leak:1"); err != nil {
			t.Fatal(err)
		}
	}()
	for f.client.Exists(ctx, "lock:leak:1").Val() == 1 {
		if ctx.Err() != nil {
			t.Fatal("dropped lease never released")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if v := counter(t, f.reg, "lockgov_lease_leaked_total", nil); v != 1 {
		t.Fatalf("leaked = %v", v)
	}
	if v := counter(t, f.reg, "lockgov_lock_held", nil); v != 0 {
		t.Fatalf("held = %v after the leak was released", v)
	}
	if !strings.Contains(logs.String(), "garbage-collected while held") {
		t.Fatalf("leak not logged: %q", logs.String())
	}
}

func TestGovern_SkewTiers(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	f := newFixture(t, instrument.WithSkewSource(func() (time.Duration, bool) { return time.Duration(offset.Load()), true }))
	ctx := withTimeout(t, 5*time.Second)

	offset.Store(int64(300 * time.Millisecond)) // degrade: TTL x0.7
	lease, err := f.locker.Acquire(ctx, "lock:s", instrument.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if pttl := f.client.PTTL(ctx, "lock:s").Val(); pttl > 7*time.Second {
		t.Fatalf("degraded PTTL %v, want <= 7s", pttl)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The first lease left its fence counter and its release tombstone.
	before := f.client.Keys(ctx, "*").Val()
	offset.Store(int64(-600 * time.Millisecond)) // reject
	if _, err := f.locker.Acquire(ctx, "lock:s"); !errors.Is(err, instrument.ErrClockSkew) {
		t.Fatalf("err = %v, want ErrClockSkew", err)
	}
	for _, k := range f.client.Keys(ctx, "*").Val() {
		if !slices.Contains(before, k) {
			t.Fatalf("rejected call wrote key %q", k)
		}
	}
}

func TestGovern_WaitersGauge(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := withTimeout(t, 10*time.Second)
	holder, err := f.locker.Acquire(ctx, "lock:w")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := f.locker.Acquire(ctx, "lock:w")
		if err == nil {
			err = l.Release(ctx)
		}
		done <- err
	}()
	for counter(t, f.reg, "lockgov_lock_waiters", nil) != 1 {
		if ctx.Err() != nil {
			t.Fatal("waiter never counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := counter(t, f.reg, "lockgov_lock_waiters", nil); v != 0 {
		t.Fatalf("waiters = %v after the wait", v)
	}
}

func TestGovern_MaxHoldAbovePolicyRefused(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse("test.yaml", []byte(`
version: 1
patterns:
  - pattern: "lock:export:{job}"
    ttl: 10s
    max_hold: 1m
`))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, instrument.WithPolicy(p))
	ctx := withTimeout(t, 5*time.Second)
	_, err = f.locker.Acquire(ctx, "lock:export:7", instrument.WithMaxHold(time.Hour))
	if !errors.Is(err, instrument.ErrPolicy) || !strings.Contains(err.Error(), "max hold 1h0m0s") {
		t.Fatalf("err = %v, want ErrPolicy naming the max hold", err)
	}
	if v := counter(t, f.reg, "lockgov_policy_violations_total", map[string]string{"rule": "max_hold", "mode": "enforce"}); v != 1 {
		t.Fatalf("violations{rule=max_hold} = %v", v)
	}
	lease, err := f.locker.Acquire(ctx, "lock:export:7", instrument.WithMaxHold(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestGovern_AnErrorSpanLeavesTheRawKeyOut: a backend's error names the key
// for the caller; the span's exception event must not (span.RecordError
// used to copy it into exception.message, next to attributes that carry
// only the key's pattern).
func TestGovern_AnErrorSpanLeavesTheRawKeyOut(t *testing.T) {
	t.Parallel()
	f := newFixture(t, instrument.WithPolicy(quotaPolicy(t, "enforce")))
	ctx := withTimeout(t, 5*time.Second)
	const key = "lock:quota:987654"
	held, err := f.locker.Acquire(ctx, key, instrument.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()
	_, err = f.locker.Acquire(ctx, key, instrument.WithTTL(5*time.Second), instrument.FailFast())
	if !errors.Is(err, instrument.ErrNotAcquired) || !strings.Contains(err.Error(), "987654") {
		t.Fatalf("a second Acquire of a held key: %v; want ErrNotAcquired naming the key", err)
	}
	var message string
	for _, s := range f.spans.Ended() {
		for _, ev := range s.Events() {
			for _, kv := range ev.Attributes {
				if strings.Contains(kv.Value.Emit(), "987654") {
					t.Errorf("span %s event %q attribute %s carries the raw key: %q", s.Name(), ev.Name, kv.Key, kv.Value.Emit())
				}
				if kv.Key == "exception.message" {
					message = kv.Value.AsString()
				}
			}
		}
	}
	if !strings.Contains(message, "<key>") {
		t.Fatalf("exception.message %q, want the error with the key left out", message)
	}
}
