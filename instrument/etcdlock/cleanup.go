package etcdlock

import (
	"context"
	"sync"
	"time"

	"github.com/lockgov/lockgov/instrument/internal/storefail"
)

// cleanupTimeout bounds one cleanup request (a revoke, a delete) that runs
// on a context of its own: those of the background revoker and of
// MutexLocker's settle, and (as a Locker's or MutexLocker's cleanupBound)
// an Acquire's own cleanup while its caller's context is live.
const cleanupTimeout = 2 * time.Second

// cleanupGrace is how long after its caller's context has ended a call
// still cleans up inline (an Acquire that gave up revokes its lease, a
// MutexLocker deletes its key) before it leaves that to the background and
// returns. A revoke or delete that etcd answers at once (a raft write:
// milliseconds) fits in it, so a healthy etcd sees the entry gone when the
// call returns; when etcd cannot be reached or has no leader, the call
// returns this long after its caller's end, not a cleanupTimeout later.
const cleanupGrace = 100 * time.Millisecond

// cleanupContext returns the context the cleanup after a failed call runs
// on. It carries ctx's values but not its end: the cleanup must run even
// though ctx is why the call failed. It ends bound (cleanupTimeout, which
// tests raise) from now, or cleanupGrace after ctx has ended (from now if
// it has already: its cancellation, or its deadline, which may have passed
// before its timer fired), whichever comes first. What it cuts short is
// retried in the background by the caller.
func cleanupContext(ctx context.Context, bound time.Duration) (context.Context, context.CancelFunc) {
	if storefail.Ended(ctx) != nil {
		return context.WithTimeout(context.WithoutCancel(ctx), cleanupGrace)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	var (
		mu    sync.Mutex
		grace *time.Timer
		done  bool
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			grace = time.AfterFunc(cleanupGrace, cancel)
		}
	})
	return cctx, func() {
		stop()
		mu.Lock()
		done = true
		if grace != nil {
			grace.Stop()
		}
		mu.Unlock()
		cancel()
	}
}
