package redislock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxIdleChannels exposes the bound on idle subscriptions to the tests.
const MaxIdleChannels = maxIdleChannels

// WaiterID exposes the id handoff notifications name a waiter by.
func WaiterID(tok string) string { return waiterID(tok) }

// Leave runs leave.lua for a waiter with token tok and queue entry entry,
// as an Acquire that gives up does.
func Leave(ctx context.Context, c redis.UniversalClient, key, tok, entry string, fair bool) error {
	keys, err := keysFor(key)
	if err != nil {
		return err
	}
	r := &request{keys: keys, tok: tok, entry: entry, ttl: time.Second, fenceTTL: time.Minute}
	leave(ctx, c, r, fair)
	return nil
}

// AcquireLibSrc is acquire_lib.lua, for tests that call its functions.
var AcquireLibSrc = acquireLibSrc

// SetHealthInterval sets how often l's pub/sub connection is checked while
// it has waiters (healthInterval). Call it before l's first Acquire.
func SetHealthInterval(l *Locker, d time.Duration) { l.notify.health = d }

// Jittered is jittered, the wait of one back-off step.
func Jittered(d time.Duration) time.Duration { return jittered(d) }

// MaxLeaving is how many leave.lua tries of one Locker run at once.
const MaxLeaving = maxLeaving

// ReleaseSHA is the SHA1 that EVALSHA names release.lua by.
var ReleaseSHA = releaseScript.Hash()

// ReleaseSrc is release.lua as EVAL sends it (after NOSCRIPT: a server
// whose script cache a restart emptied).
var ReleaseSrc = releaseSrcFull

// WidenLeaveWindow sets the waiter-timeout part of how long l's background
// leaves and give-backs are tried (Locker.leave: until the waiter timeout
// plus the lock's TTL has passed; 5s plus the TTL by default), so that a
// test whose lock expires while its give-back is held back can count on
// the try it lets through afterwards on a loaded machine. Call it before
// l's first Acquire.
func WidenLeaveWindow(l *Locker, d time.Duration) { l.waiterTTL = d }

// PendingLeaves is how many of l's leaves run or wait in the background.
func PendingLeaves(l *Locker) int64 { return l.pendingLeaves.Load() }

// MaxPendingLeaves is how many of a Locker's leaves may wait in the
// background.
const MaxPendingLeaves = maxPendingLeaves

// GiveBack gives back, as l does for an Acquire that gave up or a Release
// whose outcome is unknown (Locker.leave: in the background, tried again
// while it can matter), what token tok may hold on key: its queue entry
// entry, and the lock if it is tok's.
func GiveBack(ctx context.Context, l *Locker, key, tok, entry string) error {
	keys, err := keysFor(key)
	if err != nil {
		return err
	}
	r := &request{keys: keys, tok: tok, entry: entry, ttl: time.Second, fenceTTL: time.Minute}
	return l.leave(ctx, r)
}

// AcquireSHA and AcquireFairSHA are the SHA1s that EVALSHA names
// acquire.lua and acquire_fair.lua by (a ResendOnce hook's SHA).
var (
	AcquireSHA     = acquireScript.Hash()
	AcquireFairSHA = acquireFairScript.Hash()
)

// SetTombstoneCap bounds the tombstones of l's releases to d in place of
// maxTombstoneTTL (a minute), so that a test can outlast one in seconds.
// It is l's own (its node's combiner), read by no other Locker. Call it
// before l's first Release. Not for quorum mode (runRelease keeps the
// default).
func SetTombstoneCap(l *Locker, d time.Duration) {
	switch s := l.store.(type) {
	case node:
		s.send.tombCap = d
	case fairNode:
		s.send.tombCap = d
	default:
		panic("SetTombstoneCap: not a single-node Locker")
	}
}
