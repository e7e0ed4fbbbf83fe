package instrument_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lockgov/lockgov/instrument"
)

// nopLease and nopLocker have no store behind them: BenchmarkGovernOverhead
// uses them to isolate the CPU that Govern itself adds to an acquire+release
// pair (policy match, the spans it skips while the global tracer provider is
// unset, metrics, the re-entrancy context), which is the "added CPU per
// pair" of the issue. nopLocker's own lease value is one of the allocations.
type nopLease struct{ ctx context.Context }

func (l nopLease) Key() string                   { return "k" }
func (l nopLease) Fence() uint64                 { return 1 }
func (l nopLease) Context() context.Context      { return l.ctx }
func (l nopLease) Refresh(context.Context) error { return nil }
func (l nopLease) Release(context.Context) error { return nil }

type nopLocker struct{}

func (nopLocker) Acquire(context.Context, string, ...instrument.AcquireOption) (instrument.Lease, error) {
	return nopLease{ctx: context.Background()}, nil
}

func BenchmarkGovernOverhead(b *testing.B) {
	g, err := instrument.NewGoverned(nopLocker{}, instrument.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, tc := range []struct{ name, key string }{
		{"declared-or-plain-key", "lock:quota:merchant"},
		{"normalised-key", "lock:order:1234567"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l, err := g.Acquire(ctx, tc.key)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// discardExporter takes the spans of BenchmarkGovernSpans through a batch
// processor, as an OTLP exporter would, and drops them.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkGovernSpans is BenchmarkGovernOverhead with spans recorded by
// the OpenTelemetry SDK (always sampled, batch processor), as bench/'s
// "lockgov redislock + Govern" row runs it: what the acquire and release
// spans cost the client per pair.
func BenchmarkGovernSpans(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	g, err := instrument.NewGoverned(nopLocker{}, instrument.WithRegisterer(prometheus.NewRegistry()), instrument.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		l, err := g.Acquire(ctx, "lock:quota:merchant")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
