package instrument_test

import (
	"context"
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
