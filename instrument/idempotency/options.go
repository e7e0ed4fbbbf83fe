package idempotency

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgov/lockgov/instrument"
)

// Defaults of the options and limits of the input.
const (
	DefaultPrefix         = "lockgov:idem:"
	DefaultLease          = 30 * time.Second
	DefaultResultTTL      = 24 * time.Hour
	DefaultMaxResultBytes = 1 << 20
	// MaxKeyBytes bounds an idempotency key.
	MaxKeyBytes = 512
	// MaxFingerprintBytes bounds a fingerprint: pass a hash of the request.
	MaxFingerprintBytes = 256
)

// Option configures a Store made by New.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	prefix         string
	lease          time.Duration
	resultTTL      time.Duration
	maxResultBytes int
	reg            prometheus.Registerer
	logger         *slog.Logger
	tp             trace.TracerProvider
	storeFailure   instrument.StoreFailurePolicy
}

func defaultConfig() config {
	return config{prefix: DefaultPrefix, lease: DefaultLease, resultTTL: DefaultResultTTL, maxResultBytes: DefaultMaxResultBytes}
}

// WithPrefix sets the prefix of every Redis key (DefaultPrefix). It must
// not contain '{' or '}': the hash tag follows it.
func WithPrefix(p string) Option {
	return optionFunc(func(c *config) error {
		for _, r := range p {
			if r == '{' || r == '}' {
				return fmt.Errorf("idempotency: WithPrefix(%q): braces would change the hash slot", p)
			}
		}
		c.prefix = p
		return nil
	})
}

// WithLease sets how long an attempt owns a key without renewing
// (DefaultLease). The owner renews every third of it while fn runs; an
// owner that dies blocks the key for at most this long. At least 100ms.
func WithLease(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("idempotency: WithLease(%v): want at least 100ms", d)
		}
		c.lease = d
		return nil
	})
}

// WithResultTTL sets how long a completed key replays its result
// (DefaultResultTTL). It must be longer than the lease.
func WithResultTTL(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < time.Second {
			return fmt.Errorf("idempotency: WithResultTTL(%v): want at least 1s", d)
		}
		c.resultTTL = d
		return nil
	})
}

// WithMaxResultBytes bounds the result a key stores (DefaultMaxResultBytes).
func WithMaxResultBytes(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("idempotency: WithMaxResultBytes(%d): want at least 1", n)
		}
		c.maxResultBytes = n
		return nil
	})
}

// WithRegisterer registers the idempotency metrics on r. Without it nothing
// is registered (library code never touches the global registry).
func WithRegisterer(r prometheus.Registerer) Option {
	return optionFunc(func(c *config) error {
		c.reg = r
		return nil
	})
}

// WithStoreFailure sets what Do does when Redis cannot be reached (a
// refused connection, a timeout): instrument.FailClosed (the default)
// returns the transport error, and the middleware answers 503;
// instrument.FailOpen runs fn without the check (Result.Degraded), counts
// it in lockgov_store_degraded_total{component="idempotency"} and logs once
// a minute. Answers of a reachable store (in progress, mismatch) never
// degrade.
func WithStoreFailure(p instrument.StoreFailurePolicy) Option {
	return optionFunc(func(c *config) error {
		if !p.Valid() {
			return fmt.Errorf("idempotency: WithStoreFailure(%v): want instrument.FailClosed or instrument.FailOpen", p)
		}
		c.storeFailure = p
		return nil
	})
}

// WithLogger sets the logger of degraded decisions (default
// slog.Default()). Keys, fingerprints and tokens are never logged.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		c.logger = l
		return nil
	})
}

// WithTracerProvider sets the provider of the "idempotency do" spans
// (default otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) error {
		c.tp = tp
		return nil
	})
}

// DoOption configures one call of Do.
type DoOption interface {
	applyDo(*doConfig)
}

type doConfig struct{ noWait bool }

type doOptionFunc func(*doConfig)

func (f doOptionFunc) applyDo(c *doConfig) { f(c) }

// NoWait makes Do return ErrInProgress at once when another attempt owns
// the key, instead of waiting for it.
func NoWait() DoOption {
	return doOptionFunc(func(c *doConfig) { c.noWait = true })
}
