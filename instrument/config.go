package instrument

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/policy"
)

// ScopeName is the instrumentation scope of the spans Govern emits.
const ScopeName = "github.com/lockgov/lockgov/instrument"

// Option configures Govern.
type Option interface {
	apply(*config)
}

type config struct {
	policy   *policy.Policy
	backend  string
	tp       trace.TracerProvider
	props    propagation.TextMapPropagator
	reg      prometheus.Registerer
	logger   *slog.Logger
	skew     func() (time.Duration, bool)
	noBeat   bool           // WithoutHeartbeat
	beatOpts []fleet.Option // WithHeartbeat

	storeFailure StoreFailurePolicy // WithStoreFailure
}

type govOptionFunc func(*config)

func (f govOptionFunc) apply(c *config) { f(c) }

// WithPolicy governs calls by p (default policy.Default()).
func WithPolicy(p *policy.Policy) Option {
	return govOptionFunc(func(c *config) { c.policy = p })
}

// WithBackendName sets the backend label when the Locker does not report
// one through a Backend() string method.
func WithBackendName(name string) Option {
	return govOptionFunc(func(c *config) { c.backend = name })
}

// WithTracerProvider sets the provider of the "acquire lock" and "release
// lock" spans (default otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return govOptionFunc(func(c *config) { c.tp = tp })
}

// WithPropagators sets how the caller's trace context is written into the
// lock value (default otel.GetTextMapPropagator()).
func WithPropagators(p propagation.TextMapPropagator) Option {
	return govOptionFunc(func(c *config) { c.props = p })
}

// WithRegisterer registers lockgov's Prometheus metrics on r. Without it the
// metrics are kept but exported nowhere: library code never registers on the
// global registry. Several governed Lockers may share one registry.
func WithRegisterer(r prometheus.Registerer) Option {
	return govOptionFunc(func(c *config) { c.reg = r })
}

// WithLogger sets the logger for leaked leases and audited violations
// (default slog.Default()). Tokens are never logged.
func WithLogger(l *slog.Logger) Option {
	return govOptionFunc(func(c *config) { c.logger = l })
}

// WithSkewSource tells Govern this process's measured clock offset to the
// lock store; ok is false while no measurement is available. The policy's
// skew tiers then shorten TTLs (degrade) or refuse new locks with
// ErrClockSkew (reject).
func WithSkewSource(f func() (offset time.Duration, ok bool)) Option {
	return govOptionFunc(func(c *config) { c.skew = f })
}

func newConfig(opts []Option) (config, error) {
	var c config
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.policy == nil {
		c.policy = policy.Default()
	}
	if err := c.policy.Validate(); err != nil {
		return c, fmt.Errorf("%w: policy: %w", ErrInvalidOption, err)
	}
	if !c.storeFailure.Valid() {
		return c, fmt.Errorf("%w: WithStoreFailure(%v)", ErrInvalidOption, c.storeFailure)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.props == nil {
		c.props = otel.GetTextMapPropagator()
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}
