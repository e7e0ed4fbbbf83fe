package quota

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgov/lockgov/internal/replicaack"
	"github.com/lockgov/lockgov/policy"
)

// Defaults of the options.
const (
	DefaultPrefix     = "lockgov:quota:"
	DefaultRequestTTL = 24 * time.Hour
	// MaxShards bounds WithShards: a short Deduct visits every shard.
	MaxShards = 1024
)

// Option configures a Quota made by New.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	shards     int
	prefix     string
	requestTTL time.Duration
	reg        prometheus.Registerer
	policy     *policy.Policy
	fallback   Fallback
	logger     *slog.Logger
	tp         trace.TracerProvider
	acks       replicaack.Acks
}

func defaultConfig() config {
	return config{shards: 1, prefix: DefaultPrefix, requestTTL: DefaultRequestTTL}
}

// WithShards spreads every key over n buckets, each in its own Cluster hash
// slot, so that one hot key is served by n Redis slots instead of one. n
// must be in 1..MaxShards; 1 (the default) keeps one bucket per key. Every
// process must use the same n for a key: a Quota with another n reads
// other buckets.
func WithShards(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > MaxShards {
			return fmt.Errorf("quota: WithShards(%d): want 1..%d", n, MaxShards)
		}
		c.shards = n
		return nil
	})
}

// WithPrefix sets the prefix of every Redis key (DefaultPrefix). It must
// not contain '{' or '}': the hash tag that keeps a bucket and its
// request-id records in one slot follows it.
func WithPrefix(p string) Option {
	return optionFunc(func(c *config) error {
		for _, r := range p {
			if r == '{' || r == '}' {
				return fmt.Errorf("quota: WithPrefix(%q): braces would change the hash slot", p)
			}
		}
		c.prefix = p
		return nil
	})
}

// WithRequestTTL sets how long a request id is remembered
// (DefaultRequestTTL): a retry later than that is a new request. It must
// be at least a millisecond.
func WithRequestTTL(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < time.Millisecond {
			return fmt.Errorf("quota: WithRequestTTL(%v): want at least 1ms", d)
		}
		c.requestTTL = d
		return nil
	})
}

// WithRegisterer registers the quota metrics on r. Without it nothing is
// registered (library code never touches the global registry).
func WithRegisterer(r prometheus.Registerer) Option {
	return optionFunc(func(c *config) error {
		c.reg = r
		return nil
	})
}

// WithPolicy sets the key patterns that label the metrics
// (lockgov_quota_deduct_total{key_pattern}): a key takes the first
// declared pattern it matches, else its normalised form (ids, numbers,
// UUIDs and hashes replaced), capped at the policy's MaxPatterns labels
// ("other" past it). Default policy.Default(). Raw keys never become labels
// unless they contain nothing id-like.
func WithPolicy(p *policy.Policy) Option {
	return optionFunc(func(c *config) error {
		if p == nil {
			return fmt.Errorf("quota: WithPolicy(nil)")
		}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("quota: WithPolicy: %w", err)
		}
		c.policy = p
		return nil
	})
}

// Fallback decides a deduction when Redis cannot be reached (see
// WithFallback). It gets Deduct's arguments and returns what Deduct
// returns: the remaining balance as it knows it, ErrInsufficient to refuse,
// or another error.
type Fallback func(ctx context.Context, key string, amount int64, requestID string) (remaining int64, err error)

// WithFallback lets f decide deductions while Redis cannot be reached (a
// refused connection, a timeout; never an answer such as ErrInsufficient).
// Without it Deduct fails closed: it returns the transport error and
// deducts nothing anywhere. There is no blind fail-open for quota: a
// deduction approved without its balance is an oversell, so what to allow
// during an outage — a small per-process allowance, a database path, a
// queue — is the caller's decision. Every call of f is counted in
// lockgov_store_degraded_total{component="quota"} and
// lockgov_quota_deduct_total{result="degraded"} and logged once a minute.
// f's deductions are not in Redis when it returns: reconcile them (see the
// package doc). Refund, Set, Add, Remaining and Rebalance always fail
// closed.
func WithFallback(f Fallback) Option {
	return optionFunc(func(c *config) error {
		if f == nil {
			return fmt.Errorf("quota: WithFallback(nil)")
		}
		c.fallback = f
		return nil
	})
}

// WithLogger sets the logger of degraded decisions (default
// slog.Default()). Keys and request ids are never logged.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		c.logger = l
		return nil
	})
}

// WithTracerProvider sets the provider of the "quota deduct" and "quota
// refund" spans (default otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) error {
		c.tp = tp
		return nil
	})
}

// WithReplicaAcks makes every Deduct and Refund wait until n replicas have
// acknowledged its write, with WAIT n timeout in one pipeline after the
// script (and a write of its request-id record that changes nothing, so
// that a retry that only replays a record is confirmed too), so that a
// failover to one of those replicas keeps the deduction and its request
// id. A call whose write fewer than n replicas acknowledged within timeout
// returns an error holding a *NotReplicatedError (errors.Is:
// ErrNotReplicated): the write ran on the primary, so retry with the same
// request id, which applies it at most once and succeeds once the replicas
// have it. It is not a store failure: WithFallback never decides it. See
// "Replica acknowledgements" in the package doc.
//
// n must be >= 1 and timeout > 0 and at most the client's ReadTimeout less
// 250ms (the WAIT's reply is read within ReadTimeout, and Redis answers a
// WAIT that timed out up to a timer tick late); timeout is rounded up to
// whole milliseconds. New refuses it on a client that does not send a
// pipeline to one node on one connection (Cluster, Ring).
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return optionFunc(func(c *config) error {
		if err := replicaack.Validate(fmt.Sprintf("quota: WithReplicaAcks(%d, %v)", n, timeout), n, timeout); err != nil {
			return err
		}
		c.acks = replicaack.New(n, timeout)
		return nil
	})
}
