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
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockgov/lockgov/instrument"
)

// MutexLocker adapts etcd's concurrency.Mutex to instrument.Locker, so code
// that already locks with a Session and Mutexes gets policy, spans and
// metrics from instrument.Govern without a rewrite:
//
//	s, _ := concurrency.NewSession(cli)
//	locker, _ := etcdlock.FromMutex(s, "/locks/")
//	lease, err := instrument.Govern(locker).Acquire(ctx, "order-42")
//	// locks concurrency.NewMutex(s, "/locks/order-42") as before
//
// What it keeps from the Mutex: the session's lease and TTL (WithTTL,
// WithMaxHold and WithoutWatchdog have no effect: the session's keepalive
// renews all its Mutexes), and the Mutex's wait (a watch from an old
// revision, so handoffs pay etcd's ~100 ms unsynced-watcher resync; use
// etcdlock.New for fast fair handoff). What it adds:
//
//   - Goroutines sharing the adapter never hold one key at once. A bare
//     Mutex keys its entry by the session's lease, so two goroutines on one
//     Session both "hold" it; the adapter serialises them per key in-process.
//   - Fence() is the create revision of the Mutex's key.
//   - Context() ends with ErrLockLost when the session ends, when the key is
//     deleted (a watch on it; a watch that ends for any other reason than
//     Release, such as a compaction or a lost leader, is re-established
//     after reading the key), when a keepalive finds the session lease gone,
//     and at the latest when local monotonic time passes the last confirmed
//     expiry (send time of a keepalive that etcd answered + the lease's TTL)
//     minus a drift margin of 2 ms + 2% of the TTL. A held lease confirms
//     the session lease itself every third of its TTL (one KeepAliveOnce,
//     which also renews it), and once at Acquire. It ends with ErrReleased
//     after Release.
//   - Release and Refresh check ownership by create revision (ErrNotHeld);
//     Mutex.Unlock deletes the key unconditionally. Release after a loss
//     never deletes anyone else's key.
//   - An Acquire that fails after it may have written the Mutex key (the
//     lock succeeded but a later step failed, or a request ended by the
//     context may have been applied) deletes this session's entry, with a
//     context of its own bounded by 2 s, before it returns: the session's
//     keepalive would otherwise keep the key, and the lock, for ever.
//   - A lease dropped without Release is released when it is
//     garbage-collected (Observer.Leaked).
//
// FailFast maps to TryLock, Retry to TryLock attempts with the backoff, and
// WaitUntilDeadline to Lock(ctx).
type MutexLocker struct {
	s   *concurrency.Session
	pfx string

	afterLock func() // test seam: runs once the Mutex is locked, before the lease is set up

	mu    sync.Mutex
	turns map[string]*turn // per-key in-process exclusion
}

// turn is a one-slot semaphore for one key; refs counts its users.
type turn struct {
	ch   chan struct{}
	refs int
}

// FromMutex returns a Locker whose Acquire(ctx, key) locks
// concurrency.NewMutex(s, pfx+key).
func FromMutex(s *concurrency.Session, pfx string) (*MutexLocker, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: etcdlock.FromMutex: nil session", instrument.ErrInvalidOption)
	}
	return &MutexLocker{s: s, pfx: pfx, turns: make(map[string]*turn)}, nil
}

// Backend returns "etcd".
func (m *MutexLocker) Backend() string { return BackendName }

func (m *MutexLocker) enter(key string) *turn {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.turns[key]
	if t == nil {
		t = &turn{ch: make(chan struct{}, 1)}
		m.turns[key] = t
	}
	t.refs++
	return t
}

func (m *MutexLocker) leave(key string, t *turn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.refs--; t.refs == 0 {
		delete(m.turns, key)
	}
}

// entry is the name concurrency.Mutex gives this session's entry in key's
// queue: the Mutex prefix, "/", the session lease in hex.
func (m *MutexLocker) entry(key string) string {
	return fmt.Sprintf("%s/%x", m.pfx+key, m.s.Lease())
}

// withdraw deletes this session's entry in key's queue if it exists. The
// caller holds key's turn, so no other goroutine of this adapter uses the
// entry. It runs on a context of its own: ctx may be why the caller failed.
func (m *MutexLocker) withdraw(ctx context.Context, key string) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	own := m.entry(key)
	_, err := m.s.Client().Txn(wctx).
		If(clientv3.Compare(clientv3.LeaseValue(own), "=", m.s.Lease())).
		Then(clientv3.OpDelete(own)).Commit()
	if err != nil {
		return fmt.Errorf("etcdlock: mutex acquire %q: could not delete this session's Mutex key %q after the failure, it stays locked until the session ends: %w", key, own, err)
	}
	return nil
}

// Acquire locks the Mutex of key as the options say.
func (m *MutexLocker) Acquire(ctx context.Context, key string, opts ...instrument.AcquireOption) (instrument.Lease, error) {
	if err := instrument.ValidateKey(key); err != nil {
		return nil, err
	}
	cfg, err := instrument.ApplyAcquireOptions(opts...)
	if err != nil {
		return nil, err
	}
	t := m.enter(key)
	mu := concurrency.NewMutex(m.s, m.pfx+key)
	if err := m.lock(ctx, key, t, mu, &cfg); err != nil {
		m.leave(key, t)
		return nil, err
	}
	if m.afterLock != nil {
		m.afterLock()
	}
	l, err := m.hold(ctx, key, t, mu, &cfg)
	if err != nil {
		// The Mutex is locked: every way out from here unlocks it.
		if cerr := context.Cause(ctx); cerr != nil {
			err = fmt.Errorf("%w: %w", instrument.ErrNotAcquired, cerr)
		}
		err = fmt.Errorf("etcdlock: mutex acquire %q: %w", key, err)
		if werr := m.withdraw(ctx, key); werr != nil {
			err = errors.Join(err, werr)
		}
		<-t.ch
		m.leave(key, t)
		return nil, err
	}
	return l, nil
}

// lock takes the in-process turn, then the Mutex, per the wait strategy. On
// error it has given the turn back and withdrawn any entry it may have left.
func (m *MutexLocker) lock(ctx context.Context, key string, t *turn, mu *concurrency.Mutex, cfg *instrument.AcquireConfig) error {
	// failed undoes an attempt that may have left our entry in etcd: a
	// request ended by ctx may still have been applied, and TryLock's own
	// cleanup runs on ctx too.
	failed := func(err error) error {
		if werr := m.withdraw(ctx, key); werr != nil {
			err = errors.Join(err, werr)
		}
		<-t.ch
		return err
	}
	attempt := func() (bool, error) {
		select {
		case t.ch <- struct{}{}:
		default:
			return false, nil
		}
		err := mu.TryLock(ctx)
		if errors.Is(err, concurrency.ErrLocked) {
			<-t.ch
			return false, nil
		}
		if err != nil {
			if cerr := context.Cause(ctx); cerr != nil {
				return false, failed(fmt.Errorf("etcdlock: mutex acquire %q: %w: %w", key, instrument.ErrNotAcquired, cerr))
			}
			return false, failed(fmt.Errorf("etcdlock: mutex acquire %q: %w", key, err))
		}
		return true, nil
	}
	switch cfg.Wait {
	case instrument.WaitFailFast, instrument.WaitRetry:
		for n := 1; ; n++ {
			got, err := attempt()
			if err != nil {
				return err
			}
			cfg.Observer.Attempt(got)
			if got {
				return nil
			}
			if cfg.Wait == instrument.WaitFailFast || n >= cfg.MaxAttempts {
				return fmt.Errorf("etcdlock: mutex acquire %q after %d attempts: %w", key, n, instrument.ErrNotAcquired)
			}
			if err := sleepCtx(ctx, ctx, cfg.Backoff.Delay(n)); err != nil {
				return fmt.Errorf("etcdlock: mutex acquire %q: %w: %w", key, instrument.ErrNotAcquired, err)
			}
		}
	default:
		cfg.Observer.Waiting(true)
		defer cfg.Observer.Waiting(false)
		select {
		case t.ch <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("etcdlock: mutex acquire %q: %w: %w", key, instrument.ErrNotAcquired, context.Cause(ctx))
		}
		err := mu.Lock(ctx)
		cfg.Observer.Attempt(err == nil)
		if err != nil {
			if cerr := context.Cause(ctx); cerr != nil {
				return failed(fmt.Errorf("etcdlock: mutex acquire %q: %w: %w", key, instrument.ErrNotAcquired, cerr))
			}
			return failed(fmt.Errorf("etcdlock: mutex acquire %q: %w", key, err))
		}
		return nil
	}
}

// hold sets up the lease of a locked Mutex: its fence, the first confirmed
// expiry of the session lease, the watch on the key and the confirmation
// loop. On error nothing is running and the caller unlocks.
func (m *MutexLocker) hold(ctx context.Context, key string, t *turn, mu *concurrency.Mutex, cfg *instrument.AcquireConfig) (*mutexLease, error) {
	// The Mutex knows its key's create revision; IsOwner is the compare on it.
	owner := mu.IsOwner()
	fence := owner.GetCompare().GetCreateRevision()
	if fence <= 0 {
		return nil, fmt.Errorf("no create revision for Mutex key %q", mu.Key())
	}
	sent := time.Now()
	ka, err := m.s.Client().KeepAliveOnce(ctx, m.s.Lease())
	if err != nil {
		return nil, fmt.Errorf("confirm the session lease: %w", err)
	}
	ttl := time.Duration(ka.TTL) * time.Second
	st := &mutexState{
		m: m, key: key, turn: t, own: mu.Key(), fence: fence, obs: cfg.Observer,
		ttl: ttl, drift: driftFor(ttl), expires: sent.Add(ttl),
		wdDone: make(chan struct{}), wDone: make(chan struct{}),
	}
	st.ctx, st.cancel = context.WithCancelCause(context.Background())
	st.bg, st.bgStop = context.WithCancel(st.ctx)
	st.mu.Lock() // the callbacks wait for both to be set
	st.timer = time.AfterFunc(time.Until(st.expires.Add(-st.drift)), st.expire)
	st.stopSession = context.AfterFunc(m.s.Ctx(), func() {
		st.lose(fmt.Errorf("%w: %q: etcd session ended", instrument.ErrLockLost, key))
	})
	st.mu.Unlock()
	// Watch from the revision at which the Mutex last saw its key, which
	// the lock's own response confirmed.
	rev := fence + 1
	if h := mu.Header(); h != nil && h.Revision >= fence {
		rev = h.Revision + 1
	}
	go st.watchdog()
	go st.watch(rev)
	h := &mutexLease{st}
	runtime.AddCleanup(h, (*mutexState).leaked, st)
	return h, nil
}

// mutexLease is the handle a caller holds. The goroutines and timers
// reference only *mutexState, so a handle dropped without Release becomes
// unreachable and its cleanup releases the lock.
type mutexLease struct {
	*mutexState
}

type mutexState struct {
	m     *MutexLocker
	key   string
	turn  *turn
	own   string
	fence int64
	ttl   time.Duration // the session lease's TTL
	drift time.Duration
	obs   instrument.Observer

	ctx         context.Context
	cancel      context.CancelCauseFunc
	bg          context.Context // bounds the goroutines; ends with the lease
	bgStop      context.CancelFunc
	stopSession func() bool

	mu       sync.Mutex
	expires  time.Time   // last confirmed expiry: send time of the confirming keepalive + TTL
	timer    *time.Timer // fires at expires - drift
	ended    bool
	released bool

	wdDone chan struct{} // watchdog exited
	wDone  chan struct{} // watch exited
}

func (st *mutexState) Key() string              { return st.key }
func (st *mutexState) Fence() uint64            { return uint64(st.fence) }
func (st *mutexState) Context() context.Context { return st.ctx }

// watch ends the lease when the Mutex key is deleted. A watch that ends
// for another reason than Release (compaction, no leader, a lost
// connection) is re-established after reading the key; the local deadline
// bounds how long that may keep failing.
func (st *mutexState) watch(rev int64) {
	defer close(st.wDone)
	c := st.m.s.Client()
	for {
		wch, cancel := watchKey(c, st.bg, st.own, clientv3.WithRev(rev), clientv3.WithFilterPut())
		deleted := false
	recv:
		for {
			select {
			case <-st.bg.Done():
				break recv
			case wr, ok := <-wch:
				if !ok {
					break recv
				}
				if len(wr.Events) > 0 { // puts are filtered: the key was deleted
					deleted = true
					break recv
				}
				if wr.Err() != nil || wr.Canceled {
					break recv
				}
			}
		}
		cancel()
		if st.bg.Err() != nil {
			return
		}
		if deleted {
			st.lose(fmt.Errorf("%w: %q: mutex key deleted", instrument.ErrLockLost, st.key))
			return
		}
		for {
			gctx, gcancel := context.WithTimeout(st.bg, st.ttl/3)
			resp, err := c.Get(gctx, st.own, clientv3.WithKeysOnly())
			gcancel()
			if err == nil {
				if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != st.fence {
					st.lose(fmt.Errorf("%w: %q: mutex key is gone", instrument.ErrLockLost, st.key))
					return
				}
				rev = resp.Header.Revision + 1
				break
			}
			if sleepCtx(st.bg, st.bg, 50*time.Millisecond) != nil {
				return
			}
		}
	}
}

// watchdog confirms the session lease every third of its TTL, moving the
// local deadline on.
func (st *mutexState) watchdog() {
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

// keepAlive renews the session lease once and moves the local deadline to
// its send time + TTL. Its context is bounded by the local deadline: past
// it the lease counts as lost whatever etcd answers.
func (st *mutexState) keepAlive(ctx context.Context) error {
	st.mu.Lock()
	deadline := st.expires.Add(-st.drift)
	ended := st.ended
	st.mu.Unlock()
	if ended {
		return fmt.Errorf("etcdlock: mutex refresh %q: %w: %w", st.key, instrument.ErrNotHeld, context.Cause(st.ctx))
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sent := time.Now()
	resp, err := st.m.s.Client().KeepAliveOnce(rctx, st.m.s.Lease())
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		err = fmt.Errorf("etcdlock: mutex refresh %q: %w: session lease not found", st.key, instrument.ErrNotHeld)
	case err != nil:
		err = fmt.Errorf("etcdlock: mutex refresh %q: %w", st.key, err)
	default:
		st.mu.Lock()
		if !st.ended {
			st.expires = sent.Add(time.Duration(resp.TTL) * time.Second)
			st.timer.Reset(time.Until(st.expires.Add(-st.drift)))
		}
		st.mu.Unlock()
	}
	st.obs.Renewed(err)
	return err
}

// expire runs when the local deadline passes without a confirmed keepalive.
func (st *mutexState) expire() {
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return
	}
	if d := time.Until(st.expires.Add(-st.drift)); d > 0 {
		st.timer.Reset(d) // a keepalive moved the deadline after the timer fired
		st.mu.Unlock()
		return
	}
	st.mu.Unlock()
	st.lose(fmt.Errorf("%w: %q: session lease expired without a confirmed keepalive", instrument.ErrLockLost, st.key))
}

// finish ends the lease with cause, once; lost says whether the Lost hook
// fires.
func (st *mutexState) finish(cause error, lost bool) {
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return
	}
	st.ended = true
	st.timer.Stop()
	st.mu.Unlock()
	st.stopSession()
	st.cancel(cause)
	if lost {
		st.obs.Lost(cause)
	}
}

func (st *mutexState) lose(cause error) { st.finish(cause, true) }

// Refresh checks that the Mutex key is still ours and renews the session.
func (st *mutexState) Refresh(ctx context.Context) error {
	resp, err := st.m.s.Client().Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(st.own), "=", st.fence)).Commit()
	if err != nil {
		err = fmt.Errorf("etcdlock: mutex refresh %q: %w", st.key, err)
		st.obs.Renewed(err)
		return err
	}
	if !resp.Succeeded {
		err = fmt.Errorf("etcdlock: mutex refresh %q: %w", st.key, instrument.ErrNotHeld)
		st.obs.Renewed(err)
		st.lose(fmt.Errorf("%w: %q is no longer owned by this session", instrument.ErrLockLost, st.key))
		return err
	}
	err = st.keepAlive(ctx)
	if errors.Is(err, instrument.ErrNotHeld) {
		st.lose(fmt.Errorf("%w: %q: session lease is gone", instrument.ErrLockLost, st.key))
	}
	return err
}

// Release deletes the Mutex key if it is still ours, and frees the
// in-process turn.
func (st *mutexState) Release(ctx context.Context) error {
	st.mu.Lock()
	if st.released {
		st.mu.Unlock()
		return fmt.Errorf("etcdlock: mutex release %q: %w: already released", st.key, instrument.ErrNotHeld)
	}
	st.released = true
	st.mu.Unlock()
	st.bgStop() // the watch must not take our own delete for a loss
	defer func() {
		// The goroutines only read; they exit on their own if ctx ends first.
		for _, done := range []chan struct{}{st.wdDone, st.wDone} {
			select {
			case <-done:
			case <-ctx.Done():
			}
		}
		<-st.turn.ch
		st.m.leave(st.key, st.turn)
	}()
	resp, err := st.m.s.Client().Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(st.own), "=", st.fence)).
		Then(clientv3.OpDelete(st.own)).Commit()
	if err != nil {
		st.finish(fmt.Errorf("%w: %q: release failed: %w", instrument.ErrLockLost, st.key, err), false)
		return fmt.Errorf("etcdlock: mutex release %q: %w", st.key, err)
	}
	if !resp.Succeeded {
		st.lose(fmt.Errorf("%w: %q was not owned at release", instrument.ErrLockLost, st.key))
		return fmt.Errorf("etcdlock: mutex release %q: %w", st.key, instrument.ErrNotHeld)
	}
	st.finish(instrument.ErrReleased, false)
	return nil
}

// leaked runs when the caller dropped the handle without Release. Even a
// lost lease still has its in-process turn, which only Release gives back.
func (st *mutexState) leaked() {
	st.mu.Lock()
	released, ended := st.released, st.ended
	st.mu.Unlock()
	if released {
		return
	}
	if !ended {
		st.obs.Leaked()
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_ = st.Release(ctx)
	}()
}
