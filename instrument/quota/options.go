package quota

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
