package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
//   - Context() ends with ErrLockLost when the session ends or the key is
//     deleted, and with ErrReleased after Release.
//   - Release and Refresh check ownership by create revision (ErrNotHeld);
//     Mutex.Unlock deletes the key unconditionally.
//
// FailFast maps to TryLock, Retry to TryLock attempts with the backoff, and
// WaitUntilDeadline to Lock(ctx).
type MutexLocker struct {
	s   *concurrency.Session
	pfx string

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
	ok := false
	defer func() {
		if !ok {
			m.leave(key, t)
		}
	}()
	mu := concurrency.NewMutex(m.s, m.pfx+key)
	if err := m.lock(ctx, key, t, mu, &cfg); err != nil {
		return nil, err
	}
	resp, err := m.s.Client().Get(ctx, mu.Key())
	if err != nil || len(resp.Kvs) == 0 {
		<-t.ch
		if err == nil {
			err = errors.New("mutex key vanished after Lock")
		}
		return nil, fmt.Errorf("etcdlock: mutex acquire %q: %w", key, err)
	}
	ok = true
	ml := &mutexLease{m: m, key: key, turn: t, own: mu.Key(), fence: resp.Kvs[0].CreateRevision, hooks: cfg.Hooks}
	ml.ctx, ml.cancel = context.WithCancelCause(context.Background())
	ml.stopWatch = context.AfterFunc(m.s.Ctx(), func() {
		ml.lose(fmt.Errorf("%w: %q: etcd session ended", instrument.ErrLockLost, key))
	})
	wctx, wcancel := context.WithCancel(ml.ctx)
	ml.wcancel, ml.wdone = wcancel, make(chan struct{})
	go ml.watch(wctx, resp.Header.Revision+1)
	return ml, nil
}

// lock takes the in-process turn, then the Mutex, per the wait strategy.
func (m *MutexLocker) lock(ctx context.Context, key string, t *turn, mu *concurrency.Mutex, cfg *instrument.AcquireConfig) error {
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
			<-t.ch
			return false, fmt.Errorf("etcdlock: mutex acquire %q: %w", key, err)
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
			if cfg.Hooks.Attempt != nil {
				cfg.Hooks.Attempt(got)
			}
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
		if cfg.Hooks.Waiting != nil {
			cfg.Hooks.Waiting(true)
			defer cfg.Hooks.Waiting(false)
		}
		select {
		case t.ch <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("etcdlock: mutex acquire %q: %w: %w", key, instrument.ErrNotAcquired, context.Cause(ctx))
		}
		err := mu.Lock(ctx)
		if cfg.Hooks.Attempt != nil {
			cfg.Hooks.Attempt(err == nil)
		}
		if err != nil {
			<-t.ch
			if cerr := context.Cause(ctx); cerr != nil {
				return fmt.Errorf("etcdlock: mutex acquire %q: %w: %w", key, instrument.ErrNotAcquired, cerr)
			}
			return fmt.Errorf("etcdlock: mutex acquire %q: %w", key, err)
		}
		return nil
	}
}

type mutexLease struct {
	m     *MutexLocker
	key   string
	turn  *turn
	own   string
	fence int64
	hooks instrument.Hooks

	ctx       context.Context
	cancel    context.CancelCauseFunc
	stopWatch func() bool
	wcancel   context.CancelFunc
	wdone     chan struct{}

	mu       sync.Mutex
	ended    bool
	released bool
}

func (l *mutexLease) Key() string              { return l.key }
func (l *mutexLease) Fence() uint64            { return uint64(l.fence) }
func (l *mutexLease) Context() context.Context { return l.ctx }

func (l *mutexLease) watch(ctx context.Context, rev int64) {
	defer close(l.wdone)
	for wr := range l.m.s.Client().Watch(ctx, l.own, clientv3.WithRev(rev), clientv3.WithFilterPut()) {
		if len(wr.Events) > 0 {
			l.lose(fmt.Errorf("%w: %q: mutex key deleted", instrument.ErrLockLost, l.key))
			return
		}
	}
}

func (l *mutexLease) finish(cause error, lost bool) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.ended = true
	l.mu.Unlock()
	l.stopWatch()
	l.cancel(cause)
	if lost && l.hooks.Lost != nil {
		l.hooks.Lost(cause)
	}
}

func (l *mutexLease) lose(cause error) { l.finish(cause, true) }

// Refresh checks that the Mutex key is still ours and renews the session.
func (l *mutexLease) Refresh(ctx context.Context) error {
	resp, err := l.m.s.Client().Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(l.own), "=", l.fence)).Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("etcdlock: mutex refresh %q: %w", l.key, instrument.ErrNotHeld)
	} else if err == nil {
		_, err = l.m.s.Client().KeepAliveOnce(ctx, l.m.s.Lease())
	}
	if l.hooks.Renewed != nil {
		l.hooks.Renewed(err)
	}
	return err
}

// Release deletes the Mutex key if it is still ours, and frees the
// in-process turn.
func (l *mutexLease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return fmt.Errorf("etcdlock: mutex release %q: %w: already released", l.key, instrument.ErrNotHeld)
	}
	l.released = true
	l.mu.Unlock()
	l.wcancel()
	<-l.wdone
	defer func() {
		<-l.turn.ch
		l.m.leave(l.key, l.turn)
	}()
	resp, err := l.m.s.Client().Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.own), "=", l.fence)).
		Then(clientv3.OpDelete(l.own)).Commit()
	if err != nil {
		l.finish(fmt.Errorf("%w: %q: release failed: %w", instrument.ErrLockLost, l.key, err), false)
		return fmt.Errorf("etcdlock: mutex release %q: %w", l.key, err)
	}
	if !resp.Succeeded {
		l.lose(fmt.Errorf("%w: %q was not owned at release", instrument.ErrLockLost, l.key))
		return fmt.Errorf("etcdlock: mutex release %q: %w", l.key, instrument.ErrNotHeld)
	}
	l.finish(instrument.ErrReleased, false)
	return nil
}
