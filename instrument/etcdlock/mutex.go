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
//   - Fence() is the create revision of the Mutex's key. The adapter
//     remembers the last fence it handed out per key until that holder's
//     key is confirmed deleted; a Lock that re-enters this session's key
//     still standing (it reuses the key's create revision) is withdrawn and
//     locked once more, so a fence is never handed out twice.
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
//     never deletes anyone else's key. Release on a context that has
//     already ended deletes the key on a context of its own, for at most
//     100 ms: a caller's deadline is not extended by a delete that etcd
//     does not answer (unreachable, no leader); that delete is retried in
//     the background, as below.
//   - A Release whose delete does not reach etcd (etcd unreachable, the
//     context ending during the release) returns the error, and the key may
//     still stand: no TTL ends it, since the session's keepalive renews it.
//     The adapter then retries the delete in the background until it
//     succeeds or the session ends, and keeps the key's in-process turn
//     until then: this adapter's next Acquire of the key waits for it like
//     every other session's, rather than re-entering the key.
//   - An Acquire that fails after it may have written the Mutex key (the
//     lock succeeded but a later step failed, or a request ended by the
//     context may have been applied) deletes this session's entry before
//     it returns, while its caller's context has time left (at most 2 s)
//     or for 100 ms after it ended: the session's keepalive would
//     otherwise keep the key, and the lock, for ever. If etcd does not
//     answer within that time, Acquire returns and the delete is retried
//     in the background as after a failed Release. A waiting Acquire also
//     returns when concurrency.Mutex.Lock has not: after a wait that
//     failed, Lock deletes its key on the client's context, which a
//     half-open connection or a member that is down holds until etcd
//     answers again or the client is closed. The adapter keeps the key's
//     turn until that Lock has returned and the key is deleted (until
//     then Lock may still delete the key unconditionally).
//   - A lease dropped without Release is released when it is
//     garbage-collected (Observer.Leaked).
//
// FailFast maps to TryLock, Retry to TryLock attempts with the backoff, and
// WaitUntilDeadline to Lock(ctx).
type MutexLocker struct {
	s   *concurrency.Session
	pfx string

	afterLock func() // test seam: runs once the Mutex is locked, before the lease is set up
	// cleanupBound is the Locker's cleanupBound for the adapter: how long
	// its withdraw after a failed Acquire, its Release's delete on an ended
	// context (while the caller has time) and an unconfirmed key watch may
	// run on a bound of their own.
	cleanupBound time.Duration

	mu    sync.Mutex
	turns map[string]*turn // per-key in-process exclusion
	// fences is the last fence handed out per key, kept until the delete of
	// that holder's Mutex key is confirmed: a Lock that re-enters a key
	// still standing returns its old create revision, which must not be
	// handed out a second time.
	fences map[string]int64
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
	return &MutexLocker{s: s, pfx: pfx, cleanupBound: cleanupTimeout, turns: make(map[string]*turn), fences: make(map[string]int64)}, nil
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

// issued records fence as handed out for key.
func (m *MutexLocker) issued(key string, fence int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if fence > m.fences[key] {
		m.fences[key] = fence
	}
}

// lastFence is the last fence handed out for key whose Mutex key may still
// stand (0: none).
func (m *MutexLocker) lastFence(key string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fences[key]
}

// deleted records that the Mutex key of the holder with fence is gone: a
// later Lock writes a new key, with a higher create revision.
func (m *MutexLocker) deleted(key string, fence int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fences[key] == fence {
		delete(m.fences, key)
	}
}

// settle keeps key's turn, which the caller holds, while del retries the
// delete of this session's Mutex key in the background: every settleMax at
// most, until del succeeds (the key is gone) or the session ends (its
// lease, and with it the key, is gone or no longer kept alive). It then
// gives the turn back. Until then no goroutine of this adapter re-enters
// the key, which would reuse its create revision as the fence.
func (m *MutexLocker) settle(key string, t *turn, del func(ctx context.Context) error) {
	m.mu.Lock()
	t.refs++ // the goroutine's, so that the turn outlives the caller's leave
	m.mu.Unlock()
	go func() {
		defer func() {
			<-t.ch
			m.leave(key, t)
		}()
		stop := m.s.Ctx()
		for wait := settleFirst; ; wait = min(2*wait, settleMax) {
			if sleepCtx(stop, stop, wait) != nil {
				return
			}
			ctx, cancel := context.WithTimeout(stop, cleanupTimeout)
			err := del(ctx)
			cancel()
			if err == nil {
				return
			}
		}
	}()
}

// settleFirst and settleMax bound the pause between two attempts of
// settle's delete.
const (
	settleFirst = 50 * time.Millisecond
	settleMax   = time.Second
)

// entry is the name concurrency.Mutex gives this session's entry in key's
// queue: the Mutex prefix, "/", the session lease in hex.
func (m *MutexLocker) entry(key string) string {
	return fmt.Sprintf("%s/%x", m.pfx+key, m.s.Lease())
}

// withdraw deletes this session's entry in key's queue if it exists, on
// cctx (cleanupContext: ctx may be why the caller failed, and a delete
// that etcd does not answer at once must not hold the caller past its
// end). The caller holds key's turn, so no other goroutine of this adapter
// uses the entry.
func (m *MutexLocker) withdraw(cctx context.Context, key string) error {
	if err := m.deleteEntry(cctx, key); err != nil {
		return fmt.Errorf("etcdlock: mutex acquire %q: could not delete this session's Mutex key %q after the failure, the key stays locked until a retry in the background deletes it or the session ends: %w", key, m.entry(key), err)
	}
	return nil
}

// deleteEntry deletes this session's entry in key's queue if it exists.
func (m *MutexLocker) deleteEntry(ctx context.Context, key string) error {
	own := m.entry(key)
	_, err := m.s.Client().Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(own), "=", m.s.Lease())).
		Then(clientv3.OpDelete(own)).Commit()
	return err
}

// undo withdraws this session's entry in key's queue after a failed
// Acquire and gives key's turn, which the caller holds, back; if the
// withdraw fails, the turn comes back only once settle has deleted the
// entry. It returns err, joined with the withdraw's error. locking, when
// not nil, is the outcome of a Mutex.Lock that has not returned yet (see
// lockMutex): the turn is kept until it has, and the entry is deleted
// after it.
func (m *MutexLocker) undo(ctx context.Context, key string, t *turn, err error, locking <-chan error) error {
	cctx, cancel := cleanupContext(ctx, m.cleanupBound)
	defer cancel()
	if locking != nil {
		select {
		case <-locking:
			locking = nil
		case <-cctx.Done():
			m.settle(key, t, m.deleteAfter(key, locking))
			return errors.Join(err, fmt.Errorf("etcdlock: mutex acquire %q: the Mutex's own cleanup has not returned (etcd unreachable?): this session's Mutex key %q may stand until a retry in the background deletes it or the session ends", key, m.entry(key)))
		}
	}
	if werr := m.withdraw(cctx, key); werr != nil {
		m.settle(key, t, func(ctx context.Context) error { return m.deleteEntry(ctx, key) })
		return errors.Join(err, werr)
	}
	<-t.ch
	return err
}

// deleteAfter is settle's delete of this session's entry in key's queue
// once locking, the outcome of a Mutex.Lock, has come: until then the
// Lock may still delete that key unconditionally (Mutex.Unlock), and with
// the turn given back that delete could hit the key of this adapter's
// next holder.
func (m *MutexLocker) deleteAfter(key string, locking <-chan error) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if locking != nil { // settle calls this from one goroutine
			select {
			case <-locking:
				locking = nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return m.deleteEntry(ctx, key)
	}
}

// Acquire locks the Mutex of key as the options say.
func (m *MutexLocker) Acquire(ctx context.Context, key string, opts ...instrument.AcquireOption) (instrument.Lease, error) {
	cfg, err := acquireConfig(key, opts)
	if err != nil {
		return nil, err
	}
	t := m.enter(key)
	mu, err := m.lockNew(ctx, key, t, &cfg)
	if err != nil {
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
		err = m.undo(ctx, key, t, fmt.Errorf("etcdlock: mutex acquire %q: %w", key, err), nil)
		m.leave(key, t)
		return nil, err
	}
	return l, nil
}

// lockNew locks key's Mutex (lock) and checks that its fence is above the
// last one handed out for key. A Mutex that finds this session's key still
// standing re-enters it with its old create revision; that key is
// withdrawn and locked once more, which writes a new one. On error lock's
// contract holds.
func (m *MutexLocker) lockNew(ctx context.Context, key string, t *turn, cfg *instrument.AcquireConfig) (*concurrency.Mutex, error) {
	for again := false; ; again = true {
		mu := concurrency.NewMutex(m.s, m.pfx+key)
		if err := m.lock(ctx, key, t, mu, cfg); err != nil {
			return nil, err
		}
		owner := mu.IsOwner()
		fence, last := owner.GetCompare().GetCreateRevision(), m.lastFence(key)
		if fence <= 0 || fence > last { // hold refuses a missing revision
			return mu, nil
		}
		err := fmt.Errorf("etcdlock: mutex acquire %q: %w: the Mutex re-entered this session's key %q at fence %d, not above the fence %d already handed out for the key", key, instrument.ErrNotAcquired, mu.Key(), fence, last)
		if again {
			return nil, m.undo(ctx, key, t, err, nil)
		}
		if werr := m.withdrawNow(ctx, key); werr != nil {
			m.settle(key, t, func(ctx context.Context) error { return m.deleteEntry(ctx, key) })
			return nil, errors.Join(err, werr)
		}
		<-t.ch
	}
}

// withdrawNow is withdraw on cleanupContext(ctx, m.cleanupBound).
func (m *MutexLocker) withdrawNow(ctx context.Context, key string) error {
	cctx, cancel := cleanupContext(ctx, m.cleanupBound)
	defer cancel()
	return m.withdraw(cctx, key)
}

// lock takes the in-process turn, then the Mutex, per the wait strategy. On
// error it has withdrawn any entry it may have left and given the turn
// back, or left it to settle when the withdraw failed or Mutex.Lock had not
// returned (lockMutex).
func (m *MutexLocker) lock(ctx context.Context, key string, t *turn, mu *concurrency.Mutex, cfg *instrument.AcquireConfig) error {
	// failed undoes an attempt that may have left our entry in etcd: a
	// request ended by ctx may still have been applied, and TryLock's own
	// cleanup runs on ctx too.
	failed := func(err error) error { return m.undo(ctx, key, t, err, nil) }
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
		locking, err := lockMutex(ctx, mu)
		cfg.Observer.Attempt(err == nil)
		if locking != nil {
			return m.undo(ctx, key, t, fmt.Errorf("etcdlock: mutex acquire %q: %w: %w", key, instrument.ErrNotAcquired, err), locking)
		}
		if err != nil {
			if cerr := storefail.Ended(ctx); cerr != nil {
				return failed(fmt.Errorf("etcdlock: mutex acquire %q: %w: %w", key, instrument.ErrNotAcquired, cerr))
			}
			return failed(fmt.Errorf("etcdlock: mutex acquire %q: %w", key, err))
		}
		return nil
	}
}

// lockMutex is mu.Lock(ctx), except that it returns when ctx ends even if
// Mutex.Lock does not. A Lock whose wait fails (ctx ended) deletes its key
// before it returns, on the client's context, not on ctx: while etcd
// cannot be reached (a half-open connection, a member that is down) that
// delete, and Lock with it, lasts until etcd answers again or the client
// is closed. locking is then Lock's outcome, still to come, and err the
// cause of ctx's end.
func lockMutex(ctx context.Context, mu *concurrency.Mutex) (locking <-chan error, err error) {
	done := make(chan error, 1)
	go func() { done <- mu.Lock(ctx) }()
	select {
	case err := <-done:
		return nil, err
	case <-ctx.Done():
		select {
		case err := <-done:
			return nil, err
		default:
			return done, context.Cause(ctx)
		}
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
	m.issued(key, fence)
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
	// gone is set once release (whoever called it) confirmed that the key
	// with our create revision no longer stands.
	gone atomic.Bool
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
		wch, cancel, _ := watchKey(c, st.bg, st.m.cleanupBound, 0, st.own, clientv3.WithRev(rev), clientv3.WithFilterPut())
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
// Release), then frees the in-process turn. A ctx that has already ended
// (defer lease.Release(reqCtx) after the request was cancelled) is replaced
// by one of its own bounded by cleanupGrace (100 ms): no TTL would end the
// key, which the session keeps alive, but a caller's deadline must not be
// extended by a delete that etcd does not answer; that delete is retried in
// the background (below).
//
// When the outcome of the delete is unknown (etcd unreachable, ctx ended
// during the release, or the lease core gave up waiting for a renewal in
// flight) the key may still stand. Release returns the error, and the
// adapter keeps the key's turn and retries the delete in the background
// (settle) until it succeeds or the session ends: until then this adapter's
// Acquire of the key waits, as every other session's does, instead of
// re-entering the key with the same fence.
//
// Even a lost lease keeps its turn until Release, for the same reason.
func (st *mutexState) Release(ctx context.Context) error {
	first := st.releasing.CompareAndSwap(false, true)
	if first && storefail.Ended(ctx) != nil {
		dctx, cancel := cleanupContext(ctx, st.m.cleanupBound)
		defer cancel()
		ctx = dctx
	}
	err := st.core.Release(ctx)
	if !first {
		return err
	}
	if st.gone.Load() {
		// Deleted, or not ours: the key with our create revision is gone.
		st.m.deleted(st.key, st.fence)
		<-st.turn.ch
	} else {
		c := st.m.s.Client()
		st.m.settle(st.key, st.turn, func(ctx context.Context) error {
			if _, err := deleteOwned(ctx, c, st.own, st.fence); err != nil {
				return err
			}
			st.m.deleted(st.key, st.fence)
			return nil
		})
	}
	st.m.leave(st.key, st.turn)
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
	st.gone.Store(true)
	if !deleted {
		return instrument.ErrNotHeld
	}
	return nil
}

// dropped runs when the handle is collected without Release. The lease
// core releases a live lease (and reports it leaked); a lost one it leaves
// alone, but its turn must still come back: once the lease has ended,
// Release it here, which frees the turn either way (at once, or once
// settle has deleted the key).
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
