package redislock

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
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
	// attempt said it had joined one, and hands on the lock if a release
	// handed it to the waiter meanwhile. Best effort.
	leave(ctx context.Context, r *request)
	// wakeID says whether a deadline waiter can wait for a release
	// notification (ok), and which id the notification must name to wake
	// it ("": any release). A waiter that subscribed queues for a handoff
	// from its next attempt on.
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
	// The lock goes to the first live waiter queued for a handoff, if any.
	release(ctx context.Context, r *request) (ok bool, err error)
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
	queue    bool          // a deadline waiter that subscribed: attempts queue it for a handoff
	entry    string        // its queue entry, made on the first queued attempt
	lid      string        // the Locker's channel suffix: a handoff is published there
}

// queueEntry is the request's entry in the waiter queue: what a release
// needs to hand it the lock (see handoff_lib.lua).
func (r *request) queueEntry() string {
	if r.entry == "" {
		r.entry = r.tok + strconv.FormatInt(r.ttl.Milliseconds(), 10) + " " + r.lid + " " + r.meta
	}
	return r.entry
}

// waiterID is the id a handoff notification names the waiter by: the
// first 24 hex digits of the SHA-1 of its token, as handoff_lib.lua
// computes it (the token itself never goes on a channel).
func waiterID(tok string) string {
	sum := sha1.Sum([]byte(tok))
	return hex.EncodeToString(sum[:12])
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
	seen      uint64        // not acquired: the fence counter as of this attempt
}

// node is a lock on one Redis deployment (a single node, Sentinel or
// Cluster): whoever asks first when the lock is free gets it.
type node struct {
	c         redis.UniversalClient
	waiterTTL time.Duration // how long a queued waiter counts as alive without retrying
}

func (s node) attempt(ctx context.Context, r *request) (attempt, error) {
	kk, args := r.scriptArgs()
	if r.queue {
		kk = append(kk, r.keys.queue, r.keys.waiters)
		args = append(args, r.queueEntry(), s.waiterTTL.Milliseconds())
	}
	a, res, err := runAcquire(ctx, s.c, acquireScript, kk, args)
	if err == nil && !a.acquired {
		a.queued = r.queue
		if len(res) > 2 {
			a.seen = uint64(max(res[2], 0))
		}
	}
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

func (s node) leave(ctx context.Context, r *request) { leave(ctx, s.c, r, false) }

// leave runs leave.lua: out of the queue, and the lock handed on if a
// release handed it to this waiter meanwhile.
func leave(ctx context.Context, c redis.UniversalClient, r *request, fair bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	f := "0"
	if fair {
		f = "1"
	}
	_ = leaveScript.Run(ctx, c, []string{r.keys.lock, r.keys.queue, r.keys.waiters, r.keys.fence},
		r.tok, r.keys.channel, r.queueEntry(), (r.fenceTTL - r.ttl).Milliseconds(), f).Err()
}

// wakeID names the waiter by its id: a release hands the lock to the head
// of the queue and wakes only that waiter.
func (node) wakeID(r *request) (string, bool) { return waiterID(r.tok), true }

// retryDelay keeps the waiter's place in the queue (retry at a third of
// the waiter timeout) and retries at the holder's expiry, which hands
// nothing over.
func (s node) retryDelay(poll time.Duration, a attempt) time.Duration {
	return untilExpiry(min(poll, s.waiterTTL/3), a.holderTTL)
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

func (s node) release(ctx context.Context, r *request) (bool, error) {
	return runRelease(ctx, s.c, r, true)
}

// runRelease runs release.lua; handoff says whether waiters may be queued
// (not in quorum mode, whose waiters poll).
func runRelease(ctx context.Context, c redis.UniversalClient, r *request, handoff bool) (bool, error) {
	keys := []string{r.keys.lock, r.keys.tombstone(r.tok), r.keys.queue, r.keys.fence, r.keys.waiters}
	if !handoff {
		keys = keys[:2]
	}
	n, err := releaseScript.Run(ctx, c, keys, r.tok, r.keys.channel, tombstoneTTL(ctx), (r.fenceTTL - r.ttl).Milliseconds()).Int64()
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
