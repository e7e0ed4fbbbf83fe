package instrument_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/leakcheck"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/policy"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}

// fixture is a governed redislock on a private redis-server, with a span
// recorder and a registry to inspect.
type fixture struct {
	redis  *testenv.Redis
	client *redis.Client
	raw    *redislock.Locker
	locker *instrument.Governed
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reg    *prometheus.Registry
}

func newFixture(t *testing.T, opts ...instrument.Option) *fixture {
	t.Helper()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true, MaxRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	raw, err := redislock.New(c, redislock.WithService("payments"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() }) // its pub/sub reader outlives Acquire
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reg := prometheus.NewRegistry()
	all := append([]instrument.Option{
		instrument.WithTracerProvider(tp),
		instrument.WithRegisterer(reg),
		instrument.WithPropagators(propagation.TraceContext{}),
		// These tests count the keys a call writes: the heartbeat (tested in
		// instrument/fleet) would be one of them.
		instrument.WithoutHeartbeat(),
	}, opts...)
	g, err := instrument.NewGoverned(raw, all...)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{redis: r, client: c, raw: raw, locker: g, spans: spans, tp: tp, reg: reg}
}

func withTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// quotaPolicy declares the payment platform's per-merchant lock.
func quotaPolicy(t *testing.T, mode string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("test.yaml", []byte(`
version: 1
patterns:
  - pattern: "lock:quota:{merchant_id}"
    mode: `+mode+`
    ttl: 10s
    max_ttl: 1m
`))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
