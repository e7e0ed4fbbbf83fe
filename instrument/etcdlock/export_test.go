package etcdlock

import "time"

// SetAfterLock makes m call f once the Mutex is locked and before the lease
// is set up: tests use it to fail the steps that follow a successful lock.
func SetAfterLock(m *MutexLocker, f func()) { m.afterLock = f }

// SetHeadWatchMax sets the longest queue ahead of a waiter of l for which it
// watches the whole queue; 0 makes every waiter watch its predecessor only.
func SetHeadWatchMax(l *Locker, n int64) { l.headWatchMax = n }

// QueueWatches returns how many waits of l watched the whole queue.
func QueueWatches(l *Locker) int64 { return l.queueWatches.Load() }

// Watching returns how many waits of l have their first watch in place (the
// queue watch created and the queue read, or the predecessor watch created):
// a deletion after that reaches them through the watch.
func Watching(l *Locker) int64 { return l.watching.Load() }

// SetIssued makes m remember fence as handed out for key and its Mutex key
// as not yet confirmed deleted, as after a Release whose delete never got
// through.
func SetIssued(m *MutexLocker, key string, fence int64) { m.issued(key, fence) }

// ErrClientClosed is errClientClosed, for tests.
var ErrClientClosed = errClientClosed

// RevokesPending returns how many leases l's background revoker still has
// to give up.
func RevokesPending(l *Locker) int {
	l.revokes.mu.Lock()
	defer l.revokes.mu.Unlock()
	return len(l.revokes.pending)
}

// TurnHeld reports whether some goroutine of m holds key's in-process turn
// (a holder, an Acquire under way, or a background delete keeping it).
func TurnHeld(m *MutexLocker, key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.turns[key]
	return t != nil && len(t.ch) > 0
}

// SetCleanupBound sets how long the cleanup l does for a caller may run on
// a bound of its own (cleanupTimeout otherwise): its revoke while the
// caller's context is live, and a watch etcd has not confirmed once its
// waiter has left. Tests raise it past anything they wait for, so that a
// call that returns did so because its caller's context ended.
func SetCleanupBound(l *Locker, d time.Duration) { l.cleanupBound = d }

// SetMutexCleanupBound is SetCleanupBound for m: its withdraw, its
// Release's delete on an ended context and its key watch.
func SetMutexCleanupBound(m *MutexLocker, d time.Duration) { m.cleanupBound = d }

// SetAfterPool makes every Release of l that pools its lease call f before
// the lease ends; f's lose ends the lease lost, as its expiry timer firing
// at that moment would.
func SetAfterPool(l *Locker, f func(lose func())) { l.afterPool = f }
