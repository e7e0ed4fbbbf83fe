package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/leasecore"
)

// lease is the handle a caller holds. Everything that runs on its own (the
// lease core's keepalive watchdog and expiry timer, the own-key watch)
// references only *leaseState, so a handle dropped without Release becomes
// unreachable and the lease core releases the lock (leasecore.Track).
type lease struct {
	*leaseState
}

// leaseState is one Acquire's session lease and queue entry. The lifecycle
// (local deadline, watchdog, max hold, ending once, release once) is the
// lease core's; this adds what only etcd knows: the keepalive, the
// owner-checked delete, the lease pool and the watch on our own entry.
type leaseState struct {
	l          *Locker
	key        string
	pfx        string // queue prefix
	own        string // our queue entry: pfx + lease id
	id         clientv3.LeaseID
	ttl        time.Duration // granted lease TTL
	noWatchdog bool
	core       *leasecore.Lease

	// fence is set before the handle is handed out and only read after.
	fence int64
	// releasing is set when Release starts: a deletion of our entry from
	// then on is Release's own (or Release reports ErrNotHeld itself).
	releasing atomic.Bool

	bg     context.Context // bounds the own-key watch; ends with the lease
	bgStop context.CancelFunc
	stamp  chan string   // lock value with acquired_at, written by watchOwn
	owDone chan struct{} // nil until the own-key watch starts
}

// newLeaseState starts the lifecycle of a granted lease, sent being when
// its TTL started to count. While the caller waits in the queue the
// watchdog keeps the lease alive; it is held only from acquired on.
func newLeaseState(l *Locker, key string, id clientv3.LeaseID, ttl time.Duration, sent time.Time, cfg *instrument.AcquireConfig) *leaseState {
	pfx := l.QueuePrefix(key)
	st := &leaseState{
		l: l, key: key, pfx: pfx, own: fmt.Sprintf("%s%016x", pfx, int64(id)), id: id,
		ttl: ttl, noWatchdog: cfg.NoWatchdog,
		stamp: make(chan string, 1),
	}
	st.core = leasecore.New(leasecore.Config{
		Name: "etcdlock", Key: key, TTL: ttl, Start: sent, MaxHold: cfg.MaxHold,
		// Renewed from the grant on, also with WithoutWatchdog: a waiter's
		// lease must outlive its wait (acquired stops it then).
		Watchdog: true,
		Waiting:  true,
		Events:   cfg.Observer,
		Renew:    func(ctx context.Context) (time.Duration, error) { return keepAliveOnce(ctx, l.c, id) },
		Refresh:  func(ctx context.Context) (time.Duration, error) { return renewOwned(ctx, l.c, st.own, st.fence, id) },
		Release:  st.release,
		OnLost:   st.lost,
	})
	st.bg, st.bgStop = context.WithCancel(st.core.Context())
	return st
}

// lost gives the lease of a held lock that ended without Release (its local
// deadline passed in an outage, a renewal found it gone, its key was
// deleted) back to etcd, in the background (revoker): nobody renews it any
// more, but etcd may still have it, and with it our entry ahead of every
// waiter. After a restart or a leader election etcd gives it its whole TTL
// again, so without a revoke the lock stays taken by nobody for up to one
// more TTL after etcd is back, unless the caller gets round to Release. A
// lease etcd has expired already answers ErrLeaseNotFound to the revoke,
// which ends the retries. The lease is this Acquire's own (the pool hands a
// lease to one Acquire at a time, and only after a Release), so the revoke
// ends nothing else. Not once Release has begun: Release deletes or
// revokes the lease itself, or hands it to the pool for the next Acquire,
// whose lease it then is.
func (st *leaseState) lost(error) {
	if st.releasing.Load() {
		return
	}
	st.l.revokeLater(st.id)
}

// checkLive refuses to hand out a lease that has already ended, or whose
// local deadline has passed although the timer has not run yet (a paused or
// overloaded process): etcd may already have expired it.
func (st *leaseState) checkLive() error {
	if !time.Now().Before(st.core.Deadline()) {
		st.core.Lose(fmt.Errorf("%w: %q: session lease passed its local deadline before the lock was taken", instrument.ErrLockLost, st.key))
	}
	// Cause, not the context's: a Lose that found the lease already ending
	// on another goroutine returns before that one cancels the context.
	if cause := st.core.Cause(); cause != nil {
		return fmt.Errorf("etcdlock: acquire %q: %w", st.key, cause)
	}
	return nil
}

// acquired marks the lock held with fence and hands out the caller's handle.
func (st *leaseState) acquired(fence int64) *lease {
	st.fence = fence
	st.core.Hold()
	if st.noWatchdog {
		st.core.StopWatchdog()
	}
	h := &lease{st}
	leasecore.Track(h, st.core)
	return h
}

func (st *leaseState) Key() string                       { return st.key }
func (st *leaseState) Fence() uint64                     { return uint64(st.fence) }
func (st *leaseState) Context() context.Context          { return st.core.Context() }
func (st *leaseState) Refresh(ctx context.Context) error { return st.core.Refresh(ctx) }
func (st *leaseState) Release(ctx context.Context) error { return st.core.Release(ctx) }

// stampAfter is how long a waiter that took the lock over holds it before
// acquired_at_ms is written into its entry's value.
const stampAfter = 100 * time.Millisecond

// watchGrace is how long a lock taken without waiting is held before the
// own-key watch starts. A watch costs etcd a watcher and the client a
// create, usually a read (see watchOwn) and a cancel: for the short critical
// sections most locks guard, that was more than the lock itself (uncontended
// pairs took twice as long as concurrency.Mutex's put, get and delete;
// docs/BENCHMARKS.md). A lease released within the grace never watches. One
// held longer starts the watch then, and the read that follows a watch's
// creation covers the grace: a deletion in it is noticed at its end instead
// of at once. Expiry needs no watch (the lease core's local deadline ends
// the lease), so only a deletion by someone else is noticed up to
// watchGrace late.
const watchGrace = stampAfter

// startOwnWatch watches our queue entry from rev, after grace: its deletion
// by anyone (lease expiry, revoke, an operator) ends the lease.
func (st *leaseState) startOwnWatch(rev int64, grace time.Duration) {
	st.owDone = make(chan struct{})
	go st.watchOwn(rev, grace)
}

func (st *leaseState) watchOwn(rev int64, grace time.Duration) {
	defer close(st.owDone)
	ownRev := rev - 1 // the create revision of our entry
	var (
		stamp   string           // the value to write once stampAt fires
		stampAt <-chan time.Time // nil: nothing to write
	)
	if grace > 0 {
		t := time.NewTimer(grace)
		select {
		case <-st.bg.Done():
			t.Stop()
			return
		case <-t.C:
		}
		rev = 0 // anything may have happened since: the watch's creation reads the key
	}
	for {
		if st.bg.Err() != nil {
			return
		}
		// A watch from the current revision is synced at once; one from an
		// older revision costs etcd a history scan every 100 ms until it
		// catches up. If anything happened since rev-1, check the key.
		wch, cancel := st.l.watch(st.bg, st.own, clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	watching:
		for {
			select {
			case <-st.bg.Done():
				break watching
			case stamp = <-st.stamp:
				// Record the acquisition time off the handoff's path, and
				// only once the lock has been held for stampAfter: a
				// shorter hold is over before anyone needs it (hold-time
				// rules are longer), and skipping the write spares etcd
				// one write per short critical section.
				stampAt = time.After(stampAfter)
			case <-stampAt:
				stampAt = nil
				// Only while the entry is still ours.
				sctx, scancel := context.WithTimeout(st.bg, st.ttl/3)
				_, _ = st.l.c.Txn(sctx).
					If(clientv3.Compare(clientv3.CreateRevision(st.own), "=", ownRev)).
					Then(clientv3.OpPut(st.own, stamp, clientv3.WithIgnoreLease())).Commit()
				scancel()
			case wr, ok := <-wch:
				if !ok {
					break watching
				}
				if wr.Created && wr.Header.Revision >= rev {
					// The watch covers what follows its creation; a read
					// at a later revision covers what came before.
					if gone, err := st.ownGone(ownRev); err != nil {
						break watching
					} else if gone {
						cancel()
						if !st.releasing.Load() {
							st.core.Lose(fmt.Errorf("%w: %q: lock key is gone", instrument.ErrLockLost, st.key))
						}
						return
					}
				}
				for _, ev := range wr.Events {
					// A member behind our put serves the watch from its own
					// current revision and replays what came before: with a
					// reused lease, the deletion of our previous entry of
					// the same name. Only a deletion after ownRev is ours.
					if ev.Type == clientv3.EventTypeDelete && ev.Kv.ModRevision > ownRev {
						cancel()
						if !st.releasing.Load() {
							st.core.Lose(fmt.Errorf("%w: %q: lock key deleted at revision %d (lease expired or revoked, or deleted by someone else)",
								instrument.ErrLockLost, st.key, ev.Kv.ModRevision))
						}
						return
					}
				}
				if wr.Err() != nil {
					break watching
				}
			}
		}
		cancel()
		if st.bg.Err() != nil {
			return
		}
		// The watch ended (compaction, no leader, connection lost): look at
		// the key itself, then watch again. The local deadline bounds how
		// long this may fail.
		if sleepCtx(st.bg, st.bg, 50*time.Millisecond) != nil {
			return
		}
		rev = 0 // any created revision triggers the read
	}
}

// ownGone reads our entry: gone is true when it no longer exists with the
// create revision ownRev.
func (st *leaseState) ownGone(ownRev int64) (gone bool, err error) {
	ctx, cancel := context.WithTimeout(st.bg, st.ttl/3)
	defer cancel()
	resp, err := st.l.c.Get(ctx, st.own, clientv3.WithKeysOnly())
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != ownRev, nil
}

// stopWatch ends the own-key watch and waits for it.
func (st *leaseState) stopWatch(ctx context.Context) error {
	st.bgStop()
	if st.owDone == nil {
		return nil
	}
	select {
	case <-st.owDone:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// release is the lease core's Release: delete the lock key if it is still
// ours, then put the lease back into the pool for the next Acquire, or
// revoke it.
func (st *leaseState) release(ctx context.Context) error {
	st.releasing.Store(true)
	// Delete first, so the next waiter is woken without waiting for the
	// own-key watch to stop; the watch ignores our own delete.
	deleted, err := deleteOwned(ctx, st.l.c, st.own, st.fence)
	if serr := st.stopWatch(ctx); serr != nil {
		// ctx has ended, so the lease is revoked in the background: if the
		// delete did not go through (err) the key may stand, and revoking
		// deletes it; if it did, nothing is attached to the lease any more,
		// and the lease, which is not pooled, would live out its TTL.
		st.revoke(ctx, true)
		return fmt.Errorf("release interrupted: %w", serr)
	}
	if err == nil && deleted && !st.core.Ended() {
		// The core's deadline is the last confirmed expiry minus the drift.
		expires := st.core.Deadline().Add(leasecore.Drift(st.ttl))
		if !st.l.pool.put(int64(st.ttl/time.Second), st.id, expires) {
			_, _ = st.l.c.Revoke(ctx, st.id)
		} else if st.l.afterPool != nil {
			st.l.afterPool(func() {
				st.core.Lose(fmt.Errorf("%w: %q: lost as its lease was pooled (test)", instrument.ErrLockLost, st.key))
			})
		}
	} else {
		// Revoking also deletes the key if the delete did not go through
		// (err): nobody renews the lease any more, but its TTL may be long,
		// so a revoke that does not get through either is tried again in
		// the background.
		st.revoke(ctx, err != nil)
	}
	if err != nil {
		return err
	}
	if !deleted {
		return instrument.ErrNotHeld
	}
	return nil
}

// abandon withdraws an acquire that did not get the lock: the lease ends,
// the own-key watch stops and the lease is revoked, which deletes the queue
// entry and wakes the next waiter. The entry may stand even when no reply
// said it was put (a reply lost after etcd applied the attempt), so a
// revoke that does not get through is tried again in the background
// (revoker). Inline, abandon tries only while the caller's context has time
// left (at most cleanupBound) or for cleanupGrace after it has ended
// (cleanupContext): the caller's deadline is the Acquire's, and a revoke
// that etcd does not answer at once (unreachable, no leader) would hold it
// past it.
func (st *leaseState) abandon(ctx context.Context, cause error) {
	rctx, cancel := cleanupContext(ctx, st.l.cleanupBound)
	defer cancel()
	st.core.End(cause)
	_ = st.stopWatch(rctx)
	if st.l.c.Ctx().Err() == nil { // a closed client would only retry until rctx ends
		st.revoke(rctx, true)
	}
}

// keepAliveOnce renews lease id once and returns the TTL etcd confirmed; an
// error wrapping ErrNotHeld when etcd no longer knows the lease.
func keepAliveOnce(ctx context.Context, c *clientv3.Client, id clientv3.LeaseID) (time.Duration, error) {
	resp, err := c.KeepAliveOnce(ctx, id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return 0, fmt.Errorf("%w: session lease: %w", instrument.ErrNotHeld, err)
	}
	if err != nil {
		return 0, err
	}
	return time.Duration(resp.TTL) * time.Second, nil
}

// renewOwned is Refresh: it checks that key still exists with create
// revision fence (the lease's own key, not only its session lease), then
// renews lease id once.
func renewOwned(ctx context.Context, c *clientv3.Client, key string, fence int64, id clientv3.LeaseID) (time.Duration, error) {
	resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", fence)).Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, instrument.ErrNotHeld
	}
	return keepAliveOnce(ctx, c, id)
}

// deleteOwned deletes key if it still exists with create revision fence,
// and reports whether it did.
func deleteOwned(ctx context.Context, c *clientv3.Client, key string, fence int64) (bool, error) {
	resp, err := c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", fence)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}
