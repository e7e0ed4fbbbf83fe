package idempotency

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/replicaack"
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
	acks           replicaack.Acks
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

// WithReplicaAcks makes Do run fn only once n replicas have acknowledged
// its claim of the key, and report a result (run now or replayed) only once
// n replicas have the completed record: WAIT n timeout in one pipeline
// after each script (and a write of the record that changes nothing, so
// that a replay, which writes nothing, is confirmed too). A failover to one
// of those replicas then keeps the record, and a retry replays it instead
// of running fn again. See "Replica acknowledgements" in the package doc.
//
// When fewer than n replicas acknowledge within timeout, Do returns an
// error holding a *NotReplicatedError (errors.Is: ErrNotReplicated): for a
// claim, without running fn, the key released; for a completed record (fn
// ran, or a replay), with fn's result in Result.Body and the record left
// completed on the primary, so that a retry replays it. It is not a store
// failure: WithStoreFailure(instrument.FailOpen) never degrades on it.
//
// n must be >= 1 and timeout > 0 and at most the client's ReadTimeout less
// 250ms (the WAIT's reply is read within ReadTimeout, and Redis answers a
// WAIT that timed out up to a timer tick late); timeout is rounded up to
// whole milliseconds. New refuses it on a client that does not send a
// pipeline to one node on one connection (Cluster, Ring).
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return optionFunc(func(c *config) error {
		if err := replicaack.Validate(fmt.Sprintf("idempotency: WithReplicaAcks(%d, %v)", n, timeout), n, timeout); err != nil {
			return err
		}
		c.acks = replicaack.New(n, timeout)
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
