package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/lockgov/lockgov/instrument"
)

// configLocker records the configuration Govern hands the backend.
type configLocker struct{ got instrument.AcquireConfig }

func (l *configLocker) Acquire(_ context.Context, _ string, opts ...instrument.AcquireOption) (instrument.Lease, error) {
	cfg, err := instrument.ApplyAcquireOptions(opts...)
	if err != nil {
		return nil, err
	}
	l.got = cfg
	return nopLease{ctx: context.Background()}, nil
}

// Govern skips span work when the tracer provider is a no-op; the trace id
// and the propagated headers in the lock value must still be the caller's,
// as they are when spans are recorded.
func TestGovern_NoopTracerKeepsTheCallersTraceInTheLockValue(t *testing.T) {
	t.Parallel()
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
	ctx, cancel := context.WithTimeout(trace.ContextWithRemoteSpanContext(context.Background(), sc), time.Minute)
	defer cancel()
	for name, tp := range map[string]trace.TracerProvider{
		"noop": noop.NewTracerProvider(),
		"sdk":  sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder())),
	} {
		t.Run(name, func(t *testing.T) {
			l := &configLocker{}
			g, err := instrument.NewGoverned(l, instrument.WithTracerProvider(tp),
				instrument.WithPropagators(propagation.TraceContext{}), instrument.WithRegisterer(prometheus.NewRegistry()))
			if err != nil {
				t.Fatal(err)
			}
			lease, err := g.Acquire(ctx, "lock:trace", instrument.WithMeta(map[string]string{"order": "42"}))
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if l.got.TraceID != sc.TraceID().String() {
				t.Errorf("trace id %q, want the caller's %s", l.got.TraceID, sc.TraceID())
			}
			if l.got.Meta["traceparent"] == "" || l.got.Meta["order"] != "42" {
				t.Errorf("meta %v: want the caller's meta and a traceparent", l.got.Meta)
			}
		})
	}
}

// A Governed built on the otel global provider before the application set
// one records spans once it is set: skipping no-op spans must not make
// that provider's later delegation invisible.
// Not parallel: it sets the otel global tracer provider, which Governed built
// without WithTracerProvider read.
func TestGovern_GlobalTracerProviderSetAfterGovernRecordsSpans(t *testing.T) {
	if fmt.Sprintf("%T", otel.GetTracerProvider()) != "*global.tracerProvider" {
		t.Skip("a tracer provider was already set in this process (go test -count > 1)")
	}
	g, err := instrument.NewGoverned(nopLocker{}, instrument.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spans := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	lease, err := g.Acquire(ctx, "lock:global")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range spans.Ended() {
		names = append(names, s.Name())
	}
	if len(names) != 2 || names[0] != "acquire lock" || names[1] != "release lock" {
		t.Fatalf("spans %v, want [acquire lock release lock]", names)
	}
}

// observerLocker hands out nopLeases and keeps the Observer Govern gave the
// last Acquire; lost, when set, is reported to it before Acquire returns,
// as a backend whose lease ends at once (a TTL shorter than the acquire's
// round trip) reports it.
type observerLocker struct {
	obs  instrument.Observer
	lost error
}

func (l *observerLocker) Acquire(_ context.Context, _ string, opts ...instrument.AcquireOption) (instrument.Lease, error) {
	cfg, err := instrument.ApplyAcquireOptions(opts...)
	if err != nil {
		return nil, err
	}
	l.obs = cfg.Observer
	if l.lost != nil {
		cfg.Observer.Lost(l.lost)
	}
	return nopLease{ctx: context.Background()}, nil
}

func spanNamed(spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

func governedWithRecorder(t *testing.T, l instrument.Locker) (*instrument.Governed, *tracetest.SpanRecorder) {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	g, err := instrument.NewGoverned(l, instrument.WithRegisterer(prometheus.NewRegistry()),
		instrument.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))))
	if err != nil {
		t.Fatal(err)
	}
	return g, spans
}

// The acquire span is handed to the span processor with the release span,
// not while the lock is held, but its end is the acquire's: a trace shows
// how long the acquire took, not the hold.
func TestGovern_AcquireSpanEndsAtTheAcquireAndIsExportedWithTheRelease(t *testing.T) {
	t.Parallel()
	g, spans := governedWithRecorder(t, &observerLocker{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := g.Acquire(ctx, "lock:span")
	if err != nil {
		t.Fatal(err)
	}
	returned := time.Now()
	if s := spanNamed(spans.Ended(), "acquire lock"); s != nil {
		t.Fatalf("acquire span exported while the lock is held")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ended := spans.Ended()
	acq, rel := spanNamed(ended, "acquire lock"), spanNamed(ended, "release lock")
	if acq == nil || rel == nil {
		t.Fatalf("spans %v: want acquire lock and release lock", ended)
	}
	if acq.EndTime().After(returned) {
		t.Errorf("acquire span ends %v after Acquire returned: it was stamped at the release", acq.EndTime().Sub(returned))
	}
	if acq.EndTime().After(rel.StartTime()) || acq.EndTime().Before(acq.StartTime()) {
		t.Errorf("acquire span %v-%v, release span starts %v", acq.StartTime(), acq.EndTime(), rel.StartTime())
	}
	if len(acq.Attributes()) == 0 {
		t.Error("acquire span has no attributes")
	}
}

// A lock held for long is renewed by the watchdog: its acquire span is
// exported at the first renewal, not at a release hours later.
func TestGovern_AcquireSpanIsExportedAtTheFirstRenewal(t *testing.T) {
	t.Parallel()
	l := &observerLocker{}
	g, spans := governedWithRecorder(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := g.Acquire(ctx, "lock:span")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(ctx) }()
	l.obs.Renewed(nil)
	if s := spanNamed(spans.Ended(), "acquire lock"); s == nil {
		t.Fatal("acquire span not exported after the first renewal, with the lock still held")
	}
}

// A lease that ended before Acquire returned (lost at once) has its acquire
// span exported by the time Acquire returns: nothing later would end it if
// the caller never releases.
func TestGovern_AcquireSpanOfALeaseLostBeforeAcquireReturnedIsExported(t *testing.T) {
	t.Parallel()
	g, spans := governedWithRecorder(t, &observerLocker{lost: errors.New("ttl ran out")})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := g.Acquire(ctx, "lock:span"); err != nil {
		t.Fatal(err)
	}
	if s := spanNamed(spans.Ended(), "acquire lock"); s == nil {
		t.Fatal("acquire span of a lease lost before Acquire returned was never exported")
	}
}
