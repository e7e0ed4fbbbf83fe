package redislock

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// resharding reports whether err is Redis Cluster's answer to a script
// whose hash slot is being moved to another primary (CLUSTER SETSLOT
// MIGRATING/IMPORTING, as redis-cli --cluster reshard does): TRYAGAIN (the
// script's keys are split between the two nodes, or some do not exist
// yet), or the ASK or MOVED redirect that go-redis's last try got when it
// ran out of redirects (ClusterOptions.MaxRedirects) while the slot moved.
// The node that answered did not run the script. An earlier try of the
// same call may have (a reply lost before it), which is why what follows
// such an answer is the same call under the same token: every script
// here is idempotent for its token.
//
// Also "Script attempted to access a non local key": Redis admits a
// script on the migrating node when all its keys are there, then checks
// each command inside it, and aborts it at the first that touches a key
// the script itself deleted (acquire_fair.lua dropping the last dead
// waiter from the queue, then reading the queue again). What ran before
// is kept: only clean-ups that the next try, or the next holder's, would
// make too (dead queue entries dropped), never a grant. All of lockgov's
// keys of a lock share its hash slot, so outside a migration no script
// gets this answer.
func resharding(err error) bool {
	if err == nil {
		return false // every Release asks: no allocation (errors.As's target escapes)
	}
	var rErr redis.Error
	if !errors.As(err, &rErr) {
		return false
	}
	// As redis.HasErrorPrefix reads a reply: without the "ERR " some
	// servers (KVRocks) put before every error.
	msg := strings.TrimPrefix(rErr.Error(), "ERR ")
	for _, prefix := range reshardingPrefixes {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

var reshardingPrefixes = [...]string{"TRYAGAIN", "ASK ", "MOVED ", "Script attempted to access a non local key"}

// movesSlot reports whether err is a resharding answer to a call of l's:
// resharding, except a MOVED or ASK that reached a client other than a
// ClusterClient. Such a client follows no redirect: it is pointed at a
// node that does not serve the key (a *redis.Client given one Cluster
// node's address), and every try gets the same MOVED, for good. Waiting
// it out would hold the caller until its deadline (forever without one)
// and drop the one answer that says what is wrong.
func (l *Locker) movesSlot(err error) bool {
	if !resharding(err) {
		return false
	}
	return l.cluster || !redis.HasErrorPrefix(err, "MOVED ") && !redis.HasErrorPrefix(err, "ASK ")
}

// reshardPause is the pause before the n-th try (n >= 1) of a call Redis
// answered as resharding: 10 ms, doubling to 320 ms. A slot of a few keys
// moves in milliseconds, one of many thousands in seconds.
func reshardPause(n int) time.Duration {
	return 10 * time.Millisecond << min(max(n-1, 0), 5)
}

// sleepCtx sleeps for d or until ctx ends; it reports whether it slept the
// whole d.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
