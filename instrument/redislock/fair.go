package redislock

import (
	"context"
	"time"
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
	kk, args := r.scriptArgs()
	kk = append(kk, r.keys.queue, r.keys.waiters)
	once := "0"
	if r.once {
		once = "1" // one attempt: do not join the queue only to leave it
	}
	args = append(args, s.waiterTTL.Milliseconds(), once, r.queueEntry())
	a, res, err := runAcquire(ctx, s.c, acquireFairScript, kk, args)
	if err == nil && !a.acquired {
		a.queued = !r.once
		if len(res) > 2 {
			a.pos = res[2]
		}
		if len(res) > 3 {
			a.seen = uint64(max(res[3], 0))
		}
	}
	return a, err
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
