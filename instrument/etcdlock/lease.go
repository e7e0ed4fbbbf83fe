package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
)

// lease is the handle a caller holds. Everything that runs on its own (the
// keepalive watchdog, the own-key watch, the expiry timer) references only
// *leaseState, so a handle dropped without Release becomes unreachable and
// its cleanup releases the lock.
type lease struct {
	*leaseState
}

type leaseState struct {
	l     *Locker
	key   string
	pfx   string // queue prefix
	own   string // our queue entry: pfx + lease id
	id    clientv3.LeaseID
	ttl   time.Duration // granted lease TTL
	drift time.Duration
	obs   instrument.Observer

	maxHold    time.Duration
	noWatchdog bool
	queued     time.Time

	ctx    context.Context // the session: ends with the lease
	cancel context.CancelCauseFunc
	bg     context.Context // bounds the background goroutines
	bgStop context.CancelFunc

	mu         sync.Mutex
	fence      int64
	acquiredAt time.Time
	held       bool        // the lock was acquired
	expires    time.Time   // last confirmed expiry: send time of the confirming call + TTL
	timer      *time.Timer // fires at expires - drift
	ended      bool
	released   bool
	maxHeld    bool // the watchdog stopped at max hold

	stamp  chan string // lock value with acquired_at, written by watchOwn
	wdDone chan struct{}
	owDone chan struct{} // nil until the own-key watch starts
}

// driftFor is the margin between the last confirmed expiry and the moment
// the lease context is cancelled: 2 ms plus 2% of the TTL.
func driftFor(ttl time.Duration) time.Duration {
	return 2*time.Millisecond + ttl/50
}

// newLeaseState starts the watchdog and the expiry timer of a granted lease.
// While the caller waits in the queue the watchdog keeps the lease alive.
func newLeaseState(l *Locker, key string, id clientv3.LeaseID, ttl time.Duration, sent time.Time, cfg *instrument.AcquireConfig) *leaseState {
	pfx := l.QueuePrefix(key)
	st := &leaseState{
		l: l, key: key, pfx: pfx, own: fmt.Sprintf("%s%016x", pfx, int64(id)), id: id,
		ttl: ttl, drift: driftFor(ttl), obs: cfg.Observer,
		maxHold: cfg.MaxHold, noWatchdog: cfg.NoWatchdog, queued: sent,
		expires: sent.Add(ttl),
	}
	st.stamp = make(chan string, 1)
	st.ctx, st.cancel = context.WithCancelCause(context.Background())
	st.bg, st.bgStop = context.WithCancel(st.ctx)
	st.mu.Lock()
	st.timer = time.AfterFunc(time.Until(st.expires.Add(-st.drift)), st.expire)
	st.mu.Unlock()
	st.wdDone = make(chan struct{})
	go st.watchdog()
	return st
}

func (st *leaseState) queuedAt() time.Time { return st.queued }

// checkLive refuses to hand out a lease that has already ended, or whose
// local deadline has passed although the timer has not run yet (a paused or
// overloaded process): etcd may already have expired it.
func (st *leaseState) checkLive() error {
	st.mu.Lock()
	past := !time.Now().Before(st.expires.Add(-st.drift))
	st.mu.Unlock()
	if past {
		st.lose(fmt.Errorf("%w: %q: session lease passed its local deadline before the lock was taken", instrument.ErrLockLost, st.key))
	}
	if cause := context.Cause(st.ctx); cause != nil {
		return fmt.Errorf("etcdlock: acquire %q: %w", st.key, cause)
	}
	return nil
}

// acquired marks the lock held with fence and hands out the caller's handle.
func (st *leaseState) acquired(fence int64) *lease {
	st.mu.Lock()
	st.fence, st.held, st.acquiredAt = fence, true, time.Now()
	st.mu.Unlock()
	h := &lease{st}
	runtime.AddCleanup(h, (*leaseState).leaked, st)
	return h
}

func (st *leaseState) Key() string              { return st.key }
func (st *leaseState) Fence() uint64            { return uint64(st.fence) }
func (st *leaseState) Context() context.Context { return st.ctx }

// startOwnWatch watches our queue entry from rev: its deletion by anyone
// (lease expiry, revoke, an operator) ends the lease.
func (st *leaseState) startOwnWatch(rev int64) {
	st.owDone = make(chan struct{})
	go st.watchOwn(rev)
}

func (st *leaseState) watchOwn(rev int64) {
	defer close(st.owDone)
	ownRev := rev - 1 // the create revision of our entry
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
			case v := <-st.stamp:
				// Record the acquisition time off the handoff's critical
				// path, only while the entry is still ours.
				sctx, scancel := context.WithTimeout(st.bg, st.ttl/3)
				_, _ = st.l.c.Txn(sctx).
					If(clientv3.Compare(clientv3.CreateRevision(st.own), "=", ownRev)).
					Then(clientv3.OpPut(st.own, v, clientv3.WithIgnoreLease())).Commit()
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
						if st.isReleased() {
							return // Release deleted it (or will report ErrNotHeld)
						}
						st.lose(fmt.Errorf("%w: %q: lock key is gone", instrument.ErrLockLost, st.key))
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
						if st.isReleased() {
							return // Release deleted it (or will report ErrNotHeld)
						}
						st.lose(fmt.Errorf("%w: %q: lock key deleted at revision %d (lease expired or revoked, or deleted by someone else)",
							instrument.ErrLockLost, st.key, ev.Kv.ModRevision))
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
		// the key itself, then watch again. The expiry timer bounds how long
		// this may fail.
		if sleepCtx(st.bg, st.bg, 50*time.Millisecond) != nil {
			return
		}
		rev = 0 // any created revision triggers the read
	}
}

// isReleased reports whether Release has started: a deletion of our entry
// from then on is Release's own (or Release reports ErrNotHeld itself).
func (st *leaseState) isReleased() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.released
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

// expire runs when the local deadline passes without a confirmed renewal.
func (st *leaseState) expire() {
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return
	}
	if d := time.Until(st.expires.Add(-st.drift)); d > 0 {
		st.timer.Reset(d) // a renewal moved the deadline after the timer fired
		st.mu.Unlock()
		return
	}
	cause := fmt.Errorf("%w: %q: session lease expired without a confirmed keepalive", instrument.ErrLockLost, st.key)
	if st.maxHeld {
		cause = fmt.Errorf("%w: %q held longer than max hold %v", instrument.ErrLockLost, st.key, st.maxHold)
	}
	st.mu.Unlock()
	st.lose(cause)
}

// lose ends the lease with cause, once; the Lost hook fires only for a
// lease that was held.
func (st *leaseState) lose(cause error) {
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return
	}
	st.ended = true
	held := st.held
	st.timer.Stop()
	st.mu.Unlock()
	st.cancel(cause)
	if held {
		st.obs.Lost(cause)
	}
}

// end finishes a lease without the Lost hook (Release, abandoned acquire).
func (st *leaseState) end(cause error) {
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return
	}
	st.ended = true
	st.timer.Stop()
	st.mu.Unlock()
	st.cancel(cause)
}

func (st *leaseState) watchdog() {
	defer close(st.wdDone)
	every := st.ttl / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-st.bg.Done():
			return
		case <-t.C:
		}
		st.mu.Lock()
		held, acquiredAt := st.held, st.acquiredAt
		st.mu.Unlock()
		if held && st.noWatchdog {
			return
		}
		if held && st.maxHold > 0 && time.Since(acquiredAt)+every > st.maxHold {
			// The next renewal would carry the lease past max hold.
			st.mu.Lock()
			st.maxHeld = true
			st.mu.Unlock()
			return
		}
		err := st.keepAlive(st.bg)
		switch {
		case err == nil:
			t.Reset(every)
		case errors.Is(err, instrument.ErrNotHeld):
			st.lose(fmt.Errorf("%w: %q: session lease is gone", instrument.ErrLockLost, st.key))
			return
		default:
			if st.bg.Err() != nil {
				return
			}
			t.Reset(max(every/4, time.Millisecond))
		}
	}
}

// keepAlive renews the session lease once. Its context is bounded by the
// local deadline: past it the lease counts as lost whatever etcd answers.
func (st *leaseState) keepAlive(ctx context.Context) error {
	st.mu.Lock()
	deadline := st.expires.Add(-st.drift)
	ended, held := st.ended, st.held
	st.mu.Unlock()
	if ended {
		return fmt.Errorf("etcdlock: refresh %q: %w: %w", st.key, instrument.ErrNotHeld, context.Cause(st.ctx))
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sent := time.Now()
	resp, err := st.l.c.KeepAliveOnce(rctx, st.id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		err = fmt.Errorf("etcdlock: refresh %q: %w: session lease not found", st.key, instrument.ErrNotHeld)
	case err != nil:
		err = fmt.Errorf("etcdlock: refresh %q: %w", st.key, err)
	default:
		st.mu.Lock()
		if !st.ended {
			st.expires = sent.Add(time.Duration(resp.TTL) * time.Second)
			st.timer.Reset(time.Until(st.expires.Add(-st.drift)))
		}
		st.mu.Unlock()
	}
	if held {
		st.obs.Renewed(err)
	}
	return err
}

// Refresh checks that the lock key is still ours, then renews the session
// lease by its TTL.
func (st *leaseState) Refresh(ctx context.Context) error {
	resp, err := st.l.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(st.own), "=", st.fence)).Commit()
	if err != nil {
		return fmt.Errorf("etcdlock: refresh %q: %w", st.key, err)
	}
	if !resp.Succeeded {
		err = fmt.Errorf("etcdlock: refresh %q: %w", st.key, instrument.ErrNotHeld)
		st.obs.Renewed(err)
		st.lose(fmt.Errorf("%w: %q is no longer owned by this lease", instrument.ErrLockLost, st.key))
		return err
	}
	err = st.keepAlive(ctx)
	if errors.Is(err, instrument.ErrNotHeld) {
		st.lose(fmt.Errorf("%w: %q: session lease is gone", instrument.ErrLockLost, st.key))
	}
	return err
}

// stop ends the background goroutines and waits for them.
func (st *leaseState) stop(ctx context.Context) error {
	st.bgStop()
	for _, done := range []chan struct{}{st.wdDone, st.owDone} {
		if done == nil {
			continue
		}
		select {
		case <-done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// Release deletes the lock key if it is still ours (compare on its create
// revision) and revokes the session lease.
func (st *leaseState) Release(ctx context.Context) error {
	st.mu.Lock()
	if st.released {
		st.mu.Unlock()
		return fmt.Errorf("etcdlock: release %q: %w: already released", st.key, instrument.ErrNotHeld)
	}
	st.released = true
	st.mu.Unlock()
	// Delete first, so the next waiter is woken without waiting for our
	// goroutines to stop; the own-key watch ignores our own delete.
	resp, err := st.l.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(st.own), "=", st.fence)).
		Then(clientv3.OpDelete(st.own)).
		Commit()
	if serr := st.stop(ctx); serr != nil {
		st.end(fmt.Errorf("%w: %q: release interrupted: %w", instrument.ErrLockLost, st.key, serr))
		return fmt.Errorf("etcdlock: release %q: %w", st.key, serr)
	}
	st.mu.Lock()
	expires, lost := st.expires, st.ended
	st.mu.Unlock()
	if err == nil && resp.Succeeded && !lost {
		if !st.l.pool.put(int64(st.ttl/time.Second), st.id, expires) {
			_, _ = st.l.c.Revoke(ctx, st.id)
		}
	} else {
		// Revoking also deletes the key if the delete did not go through;
		// with the watchdog stopped, the lease ends at its TTL anyway.
		_, _ = st.l.c.Revoke(ctx, st.id)
	}
	if err != nil {
		st.end(fmt.Errorf("%w: %q: release failed: %w", instrument.ErrLockLost, st.key, err))
		return fmt.Errorf("etcdlock: release %q: %w", st.key, err)
	}
	if !resp.Succeeded {
		st.lose(fmt.Errorf("%w: %q was not owned by this lease at release", instrument.ErrLockLost, st.key))
		return fmt.Errorf("etcdlock: release %q: %w", st.key, instrument.ErrNotHeld)
	}
	st.end(instrument.ErrReleased)
	return nil
}

// abandon withdraws an acquire that did not get the lock: the goroutines
// stop and the lease is revoked, which deletes the queue entry and wakes the
// next waiter.
func (st *leaseState) abandon(ctx context.Context, cause error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = st.stop(rctx)
	_, _ = st.l.c.Revoke(rctx, st.id)
	st.end(cause)
}

// leaked runs when the caller dropped a held lease without Release.
func (st *leaseState) leaked() {
	st.mu.Lock()
	skip := st.released || st.ended
	st.mu.Unlock()
	if skip {
		return
	}
	st.obs.Leaked()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), st.ttl)
		defer cancel()
		_ = st.Release(ctx)
	}()
}
