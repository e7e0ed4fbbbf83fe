package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/leasecore"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
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
	cfg, err := acquireConfig(key, opts)
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
		if cerr := storefail.Ended(ctx); cerr != nil {
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
			if cerr := storefail.Ended(ctx); cerr != nil {
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
			if cerr := storefail.Ended(ctx); cerr != nil {
				return failed(fmt.Errorf("etcdlock: mutex acquire %q: %w: %w", key, instrument.ErrNotAcquired, cerr))
			}
			return failed(fmt.Errorf("etcdlock: mutex acquire %q: %w", key, err))
		}
		return nil
	}
}

// hold sets up the lease of a locked Mutex: its fence, the first confirmed
// expiry of the session lease, the watch on the key and the lease core that
// confirms the session lease every third of its TTL. On error nothing is
// running and the caller unlocks.
func (m *MutexLocker) hold(ctx context.Context, key string, t *turn, mu *concurrency.Mutex, cfg *instrument.AcquireConfig) (*mutexLease, error) {
	// The Mutex knows its key's create revision; IsOwner is the compare on it.
	owner := mu.IsOwner()
	fence := owner.GetCompare().GetCreateRevision()
	if fence <= 0 {
		return nil, fmt.Errorf("no create revision for Mutex key %q", mu.Key())
	}
	c, id := m.s.Client(), m.s.Lease()
	sent := time.Now()
	ttl, err := keepAliveOnce(ctx, c, id)
	if err != nil {
		return nil, fmt.Errorf("confirm the session lease: %w", err)
	}
	st := &mutexState{m: m, key: key, turn: t, own: mu.Key(), fence: fence, ttl: ttl, wDone: make(chan struct{})}
	st.core = leasecore.New(leasecore.Config{
		Name: "etcdlock: mutex", Key: key, TTL: ttl, Start: sent,
		// The session's own keepalive renews the key; these confirmations
		// move the local deadline. Max hold does not apply: the session
		// would keep the key past it.
		Watchdog: true,
		Events:   cfg.Observer,
		Renew:    func(ctx context.Context) (time.Duration, error) { return keepAliveOnce(ctx, c, id) },
		Refresh:  func(ctx context.Context) (time.Duration, error) { return renewOwned(ctx, c, st.own, st.fence, id) },
		Release:  st.release,
	})
	st.bg, st.bgStop = context.WithCancel(st.core.Context())
	// The end of the session is a loss; the registration ends with the lease.
	stopSession := context.AfterFunc(m.s.Ctx(), func() {
		st.core.Lose(fmt.Errorf("%w: %q: etcd session ended", instrument.ErrLockLost, key))
	})
	context.AfterFunc(st.core.Context(), func() { stopSession() })
	// Watch from the revision at which the Mutex last saw its key, which
	// the lock's own response confirmed.
	rev := fence + 1
	if h := mu.Header(); h != nil && h.Revision >= fence {
		rev = h.Revision + 1
	}
	go st.watch(rev)
	h := &mutexLease{st}
	leasecore.Track(h, st.core)
	runtime.AddCleanup(h, (*mutexState).dropped, st)
	return h, nil
}

// mutexLease is the handle a caller holds. The goroutines and timers
// reference only *mutexState, so a handle dropped without Release becomes
// unreachable and the lease core releases the lock (leasecore.Track).
type mutexLease struct {
	*mutexState
}

// mutexState is one held Mutex. The lifecycle is the lease core's; this
// adds the session lease's keepalive, the owner-checked delete, the watch
// on the key and the in-process turn.
type mutexState struct {
	m     *MutexLocker
	key   string
	turn  *turn
	own   string
	fence int64
	ttl   time.Duration // the session lease's TTL
	core  *leasecore.Lease

	bg     context.Context // bounds the watch; ends with the lease
	bgStop context.CancelFunc
	wDone  chan struct{} // watch exited

	// releasing is set by the first Release, which gives the turn back.
	releasing atomic.Bool
}

func (st *mutexState) Key() string                       { return st.key }
func (st *mutexState) Fence() uint64                     { return uint64(st.fence) }
func (st *mutexState) Context() context.Context          { return st.core.Context() }
func (st *mutexState) Refresh(ctx context.Context) error { return st.core.Refresh(ctx) }

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
			st.core.Lose(fmt.Errorf("%w: %q: mutex key deleted", instrument.ErrLockLost, st.key))
			return
		}
		for {
			gctx, gcancel := context.WithTimeout(st.bg, st.ttl/3)
			resp, err := c.Get(gctx, st.own, clientv3.WithKeysOnly())
			gcancel()
			if err == nil {
				if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != st.fence {
					st.core.Lose(fmt.Errorf("%w: %q: mutex key is gone", instrument.ErrLockLost, st.key))
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

// Release deletes the Mutex key if it is still ours (the lease core's
// Release), then frees the in-process turn, also when the delete failed.
// Even a lost lease keeps its turn until Release: its key may still stand,
// and another goroutine of this session would re-enter it with the same
// fence.
func (st *mutexState) Release(ctx context.Context) error {
	first := st.releasing.CompareAndSwap(false, true)
	err := st.core.Release(ctx)
	if first {
		<-st.turn.ch
		st.m.leave(st.key, st.turn)
	}
	return err
}

// release is the lease core's Release: the owner-checked delete.
func (st *mutexState) release(ctx context.Context) error {
	st.bgStop() // the watch must not take our own delete for a loss
	deleted, err := deleteOwned(ctx, st.m.s.Client(), st.own, st.fence)
	// The watch only reads; it exits on its own if ctx ends first.
	select {
	case <-st.wDone:
	case <-ctx.Done():
	}
	if err != nil {
		return err
	}
	if !deleted {
		return instrument.ErrNotHeld
	}
	return nil
}

// dropped runs when the handle is collected without Release. The lease
// core releases a live lease (and reports it leaked); a lost one it leaves
// alone, but its turn must still come back: once the lease has ended,
// Release it here, which frees the turn either way.
func (st *mutexState) dropped() {
	if st.releasing.Load() {
		return
	}
	context.AfterFunc(st.core.Context(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_ = st.Release(ctx)
	})
}
