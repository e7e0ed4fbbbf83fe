package redislock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
)

// Quorum defaults, after the Redlock description.
const (
	DefaultDriftFactor = 0.01
	minNodeTimeout     = 50 * time.Millisecond
	maxNodeTimeout     = 250 * time.Millisecond
)

// quorum is the state of a Locker made by NewQuorum.
type quorum struct {
	nodes       []redis.UniversalClient
	majority    int
	driftFactor float64
	nodeTimeout time.Duration // 0: derived from the TTL
}

// WithDriftFactor sets the clock drift factor of quorum mode (default 0.01):
// a lease is valid for TTL - elapsed - TTL*factor - 2ms after the attempt
// started, and its context ends at that point unless renewed.
func WithDriftFactor(f float64) Option {
	return optionFunc(func(o *options) { o.driftFactor = f })
}

// WithNodeTimeout bounds each node's reply in quorum mode (default TTL/20,
// between 50 and 250 ms), so that a dead node costs little of the lease.
func WithNodeTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.nodeTimeout = d })
}

// NewQuorum returns a Locker over N independent Redis primaries (no
// replication between them): a lock is held when a majority of them granted
// it within the lease validity, Redlock-style.
//
// This is an efficiency lock, not a correctness lock. Its safety rests on
// bounded clock drift and process pauses (see the Redlock debate); a holder
// paused past its validity can still write. Pair it with a fence checked by
// the resource, from a store that gives one.
//
// Fence() in quorum mode is the largest fence issued by any node that
// answered the winning attempt. Every attempt moves the counter up on every
// node it reaches, so a later holder's fence is larger as long as the node
// that issued an earlier holder's fence still answers. After that node is
// lost, the order rests on the clocks of the nodes (each node's fence is at
// least its own clock in microseconds): it holds only if they agree to
// within the time between the two acquisitions. Treat it as a diagnostic,
// not a fencing token, in this mode.
//
// Give the node clients a small DialerRetries (go-redis re-dials a refused
// connection 5 times, 100 ms apart, by default): a dead node should cost a
// refused connection, not the node timeout, on every attempt.
//
// Waiters in quorum mode poll with jitter (there is no single node whose
// release notification speaks for the majority). Release and refresh run on
// every node; refresh succeeds when a majority confirms, and the lease is
// lost when a majority can no longer confirm.
func NewQuorum(nodes []redis.UniversalClient, opts ...Option) (*Locker, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: redislock.NewQuorum: no nodes", instrument.ErrInvalidOption)
	}
	for i, c := range nodes {
		if c == nil {
			return nil, fmt.Errorf("%w: redislock.NewQuorum: nil client at index %d", instrument.ErrInvalidOption, i)
		}
	}
	l, err := New(nodes[0], opts...)
	if err != nil {
		return nil, err
	}
	o := l.opts
	if o.fair {
		return nil, fmt.Errorf("%w: redislock.NewQuorum: fair mode needs one queue and is not available over a quorum", instrument.ErrInvalidOption)
	}
	if o.driftFactor < 0 || o.driftFactor >= 0.5 {
		return nil, fmt.Errorf("%w: redislock.NewQuorum: drift factor %v must be in [0, 0.5)", instrument.ErrInvalidOption, o.driftFactor)
	}
	if o.nodeTimeout < 0 {
		return nil, fmt.Errorf("%w: redislock.NewQuorum: node timeout %v must be >= 0", instrument.ErrInvalidOption, o.nodeTimeout)
	}
	l.q = &quorum{
		nodes:       append([]redis.UniversalClient(nil), nodes...),
		majority:    len(nodes)/2 + 1,
		driftFactor: o.driftFactor,
		nodeTimeout: o.nodeTimeout,
	}
	return l, nil
}

func (q *quorum) timeoutFor(ttl time.Duration) time.Duration {
	if q.nodeTimeout > 0 {
		return q.nodeTimeout
	}
	return min(max(ttl/20, minNodeTimeout), maxNodeTimeout)
}

func (q *quorum) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*q.driftFactor) + 2*time.Millisecond
}

// reply is one node's answer.
type reply struct {
	v   []int64
	n   int64
	err error
}

// fanOut runs call on every node in parallel, each bounded by the node
// timeout, and returns when all have answered.
func (q *quorum) fanOut(ctx context.Context, ttl time.Duration, call func(ctx context.Context, c redis.UniversalClient) reply) []reply {
	out := make([]reply, len(q.nodes))
	var wg sync.WaitGroup
	for i, c := range q.nodes {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, q.timeoutFor(ttl))
			defer cancel()
			out[i] = call(nctx, c)
		})
	}
	wg.Wait()
	return out
}

// acquire makes one quorum attempt. It reports acquired with the fence, or
// not acquired with the shortest remaining TTL among the holders' nodes. When
// fewer than a majority of nodes answer at all, the lock cannot be had and
// err wraps ErrNotAcquired and the nodes' errors.
func (q *quorum) acquire(ctx context.Context, kk []string, args []any, ttl time.Duration, tok string, keys keySet) (ok bool, val int64, err error) {
	start := time.Now()
	replies := q.fanOut(ctx, ttl, func(ctx context.Context, c redis.UniversalClient) reply {
		v, err := acquireScript.Run(ctx, c, kk, args...).Int64Slice()
		return reply{v: v, err: err}
	})
	var granted, answered int
	var fence, pttl int64 = 0, -1
	var errs []error
	for i, r := range replies {
		if r.err != nil || len(r.v) < 2 {
			errs = append(errs, fmt.Errorf("node %d: %w", i, r.err))
			continue
		}
		answered++
		if r.v[0] == 1 {
			granted++
			fence = max(fence, r.v[1])
		} else {
			if pttl < 0 || (r.v[1] >= 0 && r.v[1] < pttl) {
				pttl = r.v[1]
			}
			if len(r.v) > 2 {
				fence = max(fence, r.v[2])
			}
		}
	}
	// Validity counts from this attempt's start. A node that answered with
	// a grant from an earlier attempt of this Acquire (same token, its reply
	// lost then) re-armed the key's TTL in acquire.lua, so this holds for
	// it too.
	validity := ttl - time.Since(start) - q.drift(ttl)
	if granted >= q.majority && validity > 0 {
		return true, fence, nil
	}
	// Give back what was granted: a minority, or a majority that came too late.
	if granted > 0 {
		q.release(context.WithoutCancel(ctx), keys, tok, ttl)
	}
	if answered < q.majority {
		return false, 0, fmt.Errorf("%w: %d of %d nodes answered, %d needed: %w",
			instrument.ErrNotAcquired, answered, len(q.nodes), q.majority, errors.Join(errs...))
	}
	if pttl < 0 {
		pttl = 0 // granted by a majority too late: try again soon
	}
	return false, pttl, nil
}

// refresh extends the lease on every node; ok when a majority confirms.
// notHeld when so many nodes deny ownership that a majority is impossible.
func (q *quorum) refresh(ctx context.Context, keys keySet, tok string, ttl time.Duration) (ok bool, err error) {
	replies := q.fanOut(ctx, ttl, func(ctx context.Context, c redis.UniversalClient) reply {
		n, err := refreshScript.Run(ctx, c, []string{keys.lock}, tok, ttl.Milliseconds()).Int64()
		return reply{n: n, err: err}
	})
	var confirmed, denied int
	var errs []error
	for i, r := range replies {
		switch {
		case r.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, r.err))
		case r.n == 1:
			confirmed++
		default:
			denied++
		}
	}
	switch {
	case confirmed >= q.majority:
		return true, nil
	case denied > len(q.nodes)-q.majority:
		return false, nil
	}
	return false, fmt.Errorf("%d of %d nodes confirmed, %d needed: %w", confirmed, len(q.nodes), q.majority, errors.Join(errs...))
}

// release runs the owner-checked release on every node. Not ok with a nil
// error when so many nodes deny ownership that no majority holds it for
// this token — even if a minority still had it (a grant that ran late on
// one node outlives the others): the lease had already ended, and what was
// deleted there was only this token's leftover. Otherwise ok when any node
// still had the lock.
func (q *quorum) release(ctx context.Context, keys keySet, tok string, ttl time.Duration) (ok bool, err error) {
	replies := q.fanOut(ctx, ttl, func(ctx context.Context, c redis.UniversalClient) reply {
		n, err := releaseScript.Run(ctx, c, []string{keys.lock, keys.tombstone(tok)}, tok, keys.channel, tombstoneTTL(ctx)).Int64()
		return reply{n: n, err: err}
	})
	var released, denied int
	var errs []error
	for i, r := range replies {
		switch {
		case r.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, r.err))
		case r.n >= 1: // 2: an earlier try of this call released it
			released++
		default:
			denied++
		}
	}
	if denied > len(q.nodes)-q.majority {
		return false, nil
	}
	if released > 0 {
		return true, nil
	}
	return false, errors.Join(errs...)
}

// pollDelay is how long a quorum waiter sleeps between attempts: jittered
// so that waiters spread out, never past the holder's expiry or the poll
// interval.
func pollDelay(holderTTL, poll time.Duration) time.Duration {
	d := 10*time.Millisecond + rand.N(20*time.Millisecond)
	if holderTTL > 0 && holderTTL+time.Millisecond < d {
		d = holderTTL + time.Millisecond
	}
	return min(d, poll)
}
