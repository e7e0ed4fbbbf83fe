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
	kk, args := r.scriptArgs()
	kk = append(kk, r.keys.queue, r.keys.waiters)
	once := "0"
	if r.once {
		once = "1" // one attempt: do not join the queue only to leave it
	}
	args = append(args, s.waiterTTL.Milliseconds(), once)
	a, res, err := runAcquire(ctx, s.c, acquireFairScript, kk, args)
	if err == nil && !a.acquired {
		a.queued = !r.once
		if len(res) > 2 {
			a.pos = res[2]
		}
	}
	return a, err
}

// leave takes the waiter out of the queue, so the next one need not wait
// for its deadline to pass; the deadline is the net.
func (s fairNode) leave(ctx context.Context, r *request) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = leaveFairScript.Run(ctx, s.c, []string{r.keys.lock, r.keys.queue, r.keys.waiters}, r.tok, r.keys.channel).Err()
}

// wakeID is the waiter's token: a release names the head of the queue, so
// only the waiter whose turn it is wakes.
func (fairNode) wakeID(r *request) (string, bool) { return r.tok, true }

// retryDelay keeps the waiter's place in the queue (retry at a third of the
// waiter timeout); only the head waits for the holder's expiry.
func (s fairNode) retryDelay(poll time.Duration, a attempt) time.Duration {
	d := min(poll, s.waiterTTL/3)
	if a.pos != 0 {
		return d
	}
	return untilExpiry(d, a.holderTTL)
}

func (s fairNode) release(ctx context.Context, keys keySet, tok string, _ time.Duration) (bool, error) {
	// With the queue, release.lua names the head waiter in its notification.
	n, err := releaseScript.Run(ctx, s.c, []string{keys.lock, keys.tombstone(tok), keys.queue},
		tok, keys.channel, tombstoneTTL(ctx)).Int64()
	return n >= 1, err
}
