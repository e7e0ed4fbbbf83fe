package redislock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// fairNode is a lock on one Redis deployment that goes to its waiters in
// the order they asked (see Fair): a waiter queues in Redis and is woken
// by name when its turn comes. Refresh and drift are node's.
type fairNode struct {
	node
	waiterTTL time.Duration
}

func (s fairNode) attempt(ctx context.Context, r *request) (attempt, error) {
	r.queue = !r.once // every attempt but a single one queues
	// The command line of acquire_fair.lua from pointers into r, as
	// node.attempt builds acquire.lua's, through the same combiner.
	r.ttlMs, r.fenceTTLMs, r.waiterTTLMs = r.ttl.Milliseconds(), r.fenceTTL.Milliseconds(), s.waiterTTL.Milliseconds()
	r.queueEntry()
	var once any = "0"
	if r.once {
		once = "1" // one attempt: do not join the queue only to leave it
	}
	a := &r.args
	a[2], a[3], a[4], a[5], a[6] = 4, &r.keys.lock, &r.keys.fence, &r.keys.queue, &r.keys.waiters
	a[7], a[8], a[9], a[10] = &r.tok, &r.ttlMs, &r.meta, &r.fenceTTLMs
	a[11], a[12], a[13] = &r.waiterTTLMs, once, &r.entry
	v, err := evalsha(ctx, s.send, nil, s.ackOf(r), &acquireFairCall, a[:14], redis.NewCmd).Result()
	var att attempt
	var res []int64
	if err == nil {
		att, res, err = decodeAcquire(v)
	}
	if err == nil && att.acquired {
		err = s.checkAcquired(r, &att)
	}
	if err == nil && !att.acquired {
		att.queued = !r.once
		if len(res) > 2 {
			att.pos = res[2]
		}
		if len(res) > 3 {
			att.seen = uint64(max(res[3], 0))
		}
	}
	return att, err
}

// leave takes the waiter out of the queue, so the next one need not wait
// for its deadline to pass; the deadline is the net.
func (s fairNode) leave(ctx context.Context, r *request) error { return leave(ctx, s.c, r, true) }

// wakeID is the waiter's id: a release hands the lock to the head of the
// queue and wakes only that waiter.
func (fairNode) wakeID(r *request) (string, bool) { return waiterID(r.tok), true }

// takesTurns says no: the order of the Redis queue is the order callers
// asked in only if every caller is in it. A caller kept in-process behind
// its own Locker's holder or head waiter would reach the queue only when
// that one is done, behind every caller of another Locker that asked
// meanwhile. Queuing each waiter in Redis costs no herd: a release wakes
// only the waiter it hands the lock to, by name.
func (fairNode) takesTurns() bool { return false }

// retryDelay keeps the waiter's place in the queue (retry at a third of the
// waiter timeout); only the head waits for the holder's expiry.
func (s fairNode) retryDelay(poll time.Duration, a attempt) time.Duration {
	d := min(poll, s.waiterTTL/3)
	if a.pos != 0 {
		return d
	}
	return untilExpiry(d, a.holderTTL)
}
