package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/internal/leasecore"
)

// store is how a Locker takes, keeps and gives up a lock in one mode: on one
// node (node), on one node with a FIFO queue of waiters (fairNode), or over
// a majority of independent nodes (quorum). New and NewQuorum choose one;
// Acquire and the lease only call it.
type store interface {
	// attempt runs the acquire script once.
	attempt(ctx context.Context, r *request) (attempt, error)
	// leave takes a waiter that gives up out of the store's queue, when
	// attempt said it had joined one. Best effort.
	leave(ctx context.Context, r *request)
	// wakeID says whether a deadline waiter can wait for a release
	// notification (ok), and which id the notification must name to wake
	// it ("": any release).
	wakeID(r *request) (id string, ok bool)
	// retryDelay is how long a deadline waiter waits before its next
	// attempt after a, at most poll (a notification may wake it sooner).
	retryDelay(poll time.Duration, a attempt) time.Duration
	// refresh runs the owner-checked extension once; ok false with a nil
	// error means ownership is proven gone.
	refresh(ctx context.Context, keys keySet, tok string, ttl time.Duration) (ok bool, err error)
	// release runs the owner-checked release once; ok false with a nil
	// error means the lock was not this token's. ok is also true when a
	// retry of this call (go-redis resends a command whose reply was lost)
	// finds the tombstone its first try left: that try released it.
	release(ctx context.Context, keys keySet, tok string, ttl time.Duration) (ok bool, err error)
	// drift is the margin between a lease's last confirmed expiry and the
	// end of its context.
	drift(ttl time.Duration) time.Duration
}

// request is one Acquire call, as the stores see it.
type request struct {
	keys     keySet
	tok      string
	ttl      time.Duration
	meta     string        // the lock value's JSON, without its closing brace
	fenceTTL time.Duration // TTL + fence retention
	once     bool          // FailFast: one attempt, so join no queue
}

// scriptArgs are the keys and arguments of acquire.lua; the fair script
// takes more after them.
func (r *request) scriptArgs() ([]string, []any) {
	return []string{r.keys.lock, r.keys.fence},
		[]any{r.tok, r.ttl.Milliseconds(), r.meta, r.fenceTTL.Milliseconds()}
}

// attempt is the outcome of one acquire attempt.
type attempt struct {
	acquired  bool
	fence     uint64        // acquired: the lease's fence
	holderTTL time.Duration // not acquired: the holder's remaining TTL (<= 0: unknown)
	pos       int64         // fair mode: the caller's place in the queue (0: next in line)
	queued    bool          // the caller joined the store's queue: leave it on giving up
}

// node is a lock on one Redis deployment (a single node, Sentinel or
// Cluster): whoever asks first when the lock is free gets it.
type node struct {
	c redis.UniversalClient
}

func (s node) attempt(ctx context.Context, r *request) (attempt, error) {
	kk, args := r.scriptArgs()
	a, _, err := runAcquire(ctx, s.c, acquireScript, kk, args)
	return a, err
}

// runAcquire runs an acquire script on one node and decodes its reply,
// {1, fence} or {0, pttl, ...}; the whole reply is returned for the rest.
func runAcquire(ctx context.Context, c redis.UniversalClient, script *redis.Script, kk []string, args []any) (attempt, []int64, error) {
	res, err := script.Run(ctx, c, kk, args...).Int64Slice()
	if err != nil {
		return attempt{}, nil, err
	}
	if len(res) < 2 {
		return attempt{}, nil, fmt.Errorf("unexpected script reply %v", res)
	}
	if res[0] == 1 {
		return attempt{acquired: true, fence: uint64(res[1])}, res, nil
	}
	return attempt{holderTTL: time.Duration(res[1]) * time.Millisecond}, res, nil
}

func (node) leave(context.Context, *request) {}

func (node) wakeID(*request) (string, bool) { return "", true }

func (node) retryDelay(poll time.Duration, a attempt) time.Duration {
	return untilExpiry(poll, a.holderTTL)
}

// untilExpiry shortens a wait of d to the holder's expiry: an expiring
// lock publishes nothing.
func untilExpiry(d, holderTTL time.Duration) time.Duration {
	if holderTTL > 0 && holderTTL < d {
		return holderTTL + time.Millisecond
	}
	return d
}

func (s node) refresh(ctx context.Context, keys keySet, tok string, ttl time.Duration) (bool, error) {
	n, err := refreshScript.Run(ctx, s.c, []string{keys.lock}, tok, ttl.Milliseconds()).Int64()
	return n == 1, err
}

func (s node) release(ctx context.Context, keys keySet, tok string, _ time.Duration) (bool, error) {
	n, err := releaseScript.Run(ctx, s.c, []string{keys.lock, keys.tombstone(tok)}, tok, keys.channel, tombstoneTTL(ctx)).Int64()
	return n >= 1, err
}

func (node) drift(ttl time.Duration) time.Duration { return leasecore.Drift(ttl) }

// tombstoneTTL is how long a release's tombstone lives, in milliseconds:
// as long as the call can be retried, which is until its context ends, plus
// a second for a retry still in flight then; a minute when the context has
// no deadline (go-redis retries end long before).
func tombstoneTTL(ctx context.Context) int64 {
	d := time.Minute
	if dl, ok := ctx.Deadline(); ok {
		d = max(time.Until(dl), 0) + time.Second
	}
	return d.Milliseconds()
}
