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
// WaitUntilDeadline to Lock(ctx). An attempt that finds the key's in-process
// turn taken, or the Mutex locked, is refused: ErrNotAcquired, wrapping the
// context's cause once the caller's context has ended (its deadline passed,
// even before its timer fired), as every Acquire that fails on an ended
// context does.
//
// # Store failure
//
// By default a MutexLocker bounds nothing but its cleanups: clientv3 waits
// for an unreachable cluster until the caller's context ends, and the
// Acquire then returns ErrNotAcquired with the caller's error, which
// instrument.Govern does not read as a store failure (FailOpen does not
// degrade). FromMutex(s, pfx, WithRequestTimeout(d)) bounds what can be
// bounded without changing how the Mutex waits:
//
//   - each TryLock (FailFast, each attempt of Retry: one transaction, and
//     the delete of its key when the lock is taken) and the keepalive that
//     confirms the session lease once the Mutex is locked run within d;
//   - Mutex.Lock (WaitUntilDeadline) runs its put, its reads and its wait
//     on one context, so none of its round trips can be bounded alone, and
//     bounding Lock itself would bound the wait for the holder. Instead,
//     once Lock has run for a poll interval (WithPollInterval) or d,
//     whichever is shorter, and a poll interval after each answer, the
//     adapter probes etcd: a linearizable
//     count-only read of this session's Mutex key within d. A probe that
//     gets no answer within d, or probes that etcd answers with
//     codes.Unavailable (no leader) for d, end the wait as the caller's end
//     would (Lock's key is deleted as then: see above), with the store
//     failure. A Lock over within a poll interval, the uncontended case,
//     sends no probe; a waiting one, one read per poll interval. An etcd
//     unreachable when Lock starts thus fails it within about 2 x d, one
//     that becomes unreachable while it waits within about a poll interval
//     plus d; a shorter outage keeps its place in the queue.
//
// Such a failure, and one that etcd answers with codes.Unavailable, fails
// the Acquire with an error that Govern reads as a store failure (FailClosed
// returns it, FailOpen falls back to a process-local lock), that is not
// ErrNotAcquired and names the endpoints, never the key, as with New (see
// the package doc, "Store failure"). An answer that refuses the request
// (permission denied) is no store failure. 0 (the default) bounds nothing,
// as before the option existed: the adapter keeps the behaviour of the
// Mutex code it adapts unless asked; a negative d is an error from
// FromMutex. The cleanup after a failed Acquire then runs inline for at most
// d (below 2 s), then in the background (settle).
type MutexLocker struct {
	s   *concurrency.Session
	pfx string

	afterLock func() // test seam: runs once the Mutex is locked, before the lease is set up
	// cleanupBound is the Locker's cleanupBound for the adapter: how long
	// its withdraw after a failed Acquire, its Release's delete on an ended
	// context (while the caller has time) and an unconfirmed key watch may
	// run on a bound of their own.
	cleanupBound time.Duration
	// requestTimeout is WithRequestTimeout's (0: none, the default): see
	// "Store failure" above.
	requestTimeout time.Duration

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
// concurrency.NewMutex(s, pfx+key). The one Option it takes is
// WithRequestTimeout (default none: see "Store failure" above); any other
// is an error, as the Mutex has its own key prefix (pfx) and value.
func FromMutex(s *concurrency.Session, pfx string, opts ...Option) (*MutexLocker, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: etcdlock.FromMutex: nil session", instrument.ErrInvalidOption)
	}
	m := &MutexLocker{s: s, pfx: pfx, cleanupBound: cleanupTimeout, turns: make(map[string]*turn), fences: make(map[string]int64)}
	for i, opt := range opts {
		if opt == nil {
			continue
		}
		d, ok := opt.(requestTimeout)
		if !ok {
			return nil, fmt.Errorf("%w: etcdlock.FromMutex: option %d is not WithRequestTimeout, the only Option a Mutex adapter takes", instrument.ErrInvalidOption, i+1)
		}
		if d < 0 {
			return nil, fmt.Errorf("%w: etcdlock.FromMutex: negative request timeout %s", instrument.ErrInvalidOption, time.Duration(d))
		}
		m.requestTimeout = time.Duration(d)
	}
	if m.requestTimeout > 0 {
		// As New: a cleanup after a round trip etcd did not answer does not
		// wait longer for the next (settle takes over).
		m.cleanupBound = min(m.cleanupBound, m.requestTimeout)
	}
	return m, nil
}

// unreachable is the Acquire's error on key for err, a round trip what
// that etcd did not decide: a store failure to Govern (see Locker's).
func (m *MutexLocker) unreachable(key, what string, err error) error {
	return fmt.Errorf("etcdlock: mutex acquire %q: %w", key, unreachable(m.s.Client(), fmt.Errorf("%s: %w", what, err)))
}

// requestErr is the error of the round trip what of an Acquire of key, sent
// on rctx (requestContext of the caller's context, which has not ended),
// that failed with err: a store failure when rctx's bound ended it or etcd
// answered that it could not decide, err as it is otherwise.
func (m *MutexLocker) requestErr(rctx context.Context, key, what string, err error) error {
	switch {
	case boundEnded(rctx):
		return m.unreachable(key, what, fmt.Errorf("%w (%s): %v", errNoAnswer, m.requestTimeout, err))
	case couldNotDecide(err):
		return m.unreachable(key, what, err)
	}
	return fmt.Errorf("etcdlock: mutex acquire %q: %w", key, err)
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
//
// The delete's error is wrapped unless cctx had ended: the end of the
// cleanup's own bound is told, not wrapped, since the error is joined with
// the Acquire's, and a context error in it would read, to Govern, as the
// caller's end (storefail), hiding a store failure beside it.
func (m *MutexLocker) withdraw(cctx context.Context, key string) error {
	if err := m.deleteEntry(cctx, key); err != nil {
		const msg = "etcdlock: mutex acquire %q: could not delete this session's Mutex key %q after the failure, the key stays locked until a retry in the background deletes it or the session ends: "
		if cctx.Err() != nil {
			return fmt.Errorf(msg+"%v", key, m.entry(key), err)
		}
		return fmt.Errorf(msg+"%w", key, m.entry(key), err)
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
		// TryLock is one transaction, and one delete of its key when the
		// lock is taken: the request timeout bounds them together.
		rctx, rcancel := requestContext(ctx, m.requestTimeout)
		err := mu.TryLock(rctx)
		rcancel()
		if errors.Is(err, concurrency.ErrLocked) {
			<-t.ch
			return false, nil
		}
		if err != nil {
			if cerr := storefail.Ended(ctx); cerr != nil {
				return false, failed(fmt.Errorf("etcdlock: mutex acquire %q: %w: %w", key, instrument.ErrNotAcquired, cerr))
			}
			return false, failed(m.requestErr(rctx, key, "try the Mutex", err))
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
				// A refusal by the in-process turn sends nothing to etcd,
				// so no request failing on an ended ctx tells the caller
				// its end: say it here, as every other failed attempt does.
				if cerr := storefail.Ended(ctx); cerr != nil {
					return fmt.Errorf("etcdlock: mutex acquire %q after %d attempts: %w: %w", key, n, instrument.ErrNotAcquired, cerr)
				}
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
		locking, err := m.lockMutex(ctx, key, mu, cfg.PollInterval)
		cfg.Observer.Attempt(err == nil)
		if cerr := storefail.Ended(ctx); cerr != nil && err != nil {
			err = fmt.Errorf("etcdlock: mutex acquire %q: %w: %w", key, instrument.ErrNotAcquired, cerr)
		}
		if locking != nil {
			return m.undo(ctx, key, t, err, locking)
		}
		if err != nil {
			return failed(err)
		}
		return nil
	}
}

// lockMutex is mu.Lock(ctx), except that it returns when ctx ends even if
// Mutex.Lock does not, and, with a request timeout, when etcd has not
// answered this adapter for that long while Lock runs (probes). A Lock
// whose wait fails (ctx ended) deletes its key before it returns, on the
// client's context, not on ctx: while etcd cannot be reached (a half-open
// connection, a member that is down) that delete, and Lock with it, lasts
// until etcd answers again or the client is closed. locking is then Lock's
// outcome, still to come. err is the cause of ctx's end (the caller makes
// it ErrNotAcquired), a store failure that ended Lock, or Lock's own error
// (a store failure if etcd answered that it could not decide).
func (m *MutexLocker) lockMutex(ctx context.Context, key string, mu *concurrency.Mutex, poll time.Duration) (locking <-chan error, err error) {
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- mu.Lock(lctx) }()
	p := m.newProbes(lctx, key, poll)
	defer p.stop()
	for {
		select {
		case err := <-done:
			return nil, m.lockErr(ctx, lctx, key, err)
		case <-ctx.Done():
			select {
			case err := <-done:
				return nil, err
			default:
				return done, context.Cause(ctx)
			}
		case <-p.due():
			p.send()
		case perr := <-p.results:
			serr := p.failed(perr)
			if serr == nil {
				continue
			}
			// etcd has not answered for a request timeout: end Lock as
			// the caller's end would, with the store failure as cause.
			cancel(serr)
			select {
			case err := <-done:
				return nil, m.lockErr(ctx, lctx, key, err)
			default:
				return done, serr
			}
		}
	}
}

// lockErr is lockMutex's error for err, what Mutex.Lock on lctx (a child of
// ctx) returned: nil, the caller's end as it is, the store failure that
// ended lctx (probes), or Lock's own error.
func (m *MutexLocker) lockErr(ctx, lctx context.Context, key string, err error) error {
	switch {
	case err == nil:
		return nil
	case storefail.Ended(ctx) != nil:
		return err
	case lctx.Err() != nil && storefail.Unavailable(context.Cause(lctx)):
		return context.Cause(lctx)
	case couldNotDecide(err):
		return m.unreachable(key, "lock the Mutex", err)
	}
	return fmt.Errorf("etcdlock: mutex acquire %q: %w", key, err)
}

// probes tell a Mutex.Lock that waits on an etcd that does not answer from
// one that waits for a holder: concurrency.Mutex runs its put, its reads and
// its wait on one context, so no round trip of its own can be bounded. Once
// Lock has run for a poll interval or the request timeout, whichever is
// shorter, and then a poll interval after each answer, a probe reads this session's Mutex key (count only, a
// linearizable read, so it needs a leader) within the request timeout. A
// probe that gets no answer in that time, or probes that etcd answers with
// codes.Unavailable (no leader) for that long, end the wait with a store
// failure, as a Locker's failed reads do. A Lock over in less than a poll
// interval (or request timeout), the uncontended case, sends none.
type probes struct {
	m       *MutexLocker
	ctx     context.Context // the Lock's: a probe ends with it
	key     string
	poll    time.Duration
	timer   *time.Timer // nil: no request timeout, no probes
	results chan error  // the probe in flight's outcome
	// sent is when the probe in flight was sent, failingSince when the
	// first of the current run of failed ones was; fails counts that run.
	sent, failingSince time.Time
	fails              int
}

func (m *MutexLocker) newProbes(ctx context.Context, key string, poll time.Duration) *probes {
	p := &probes{m: m, ctx: ctx, key: key, poll: poll, results: make(chan error, 1)}
	if m.requestTimeout > 0 {
		// The first within the request timeout too: a put etcd does not
		// answer is found then, as a Locker's is, whatever the poll.
		p.timer = time.NewTimer(min(poll, m.requestTimeout))
	}
	return p
}

// due fires when the next probe is to be sent (never without probes).
func (p *probes) due() <-chan time.Time {
	if p.timer == nil {
		return nil
	}
	return p.timer.C
}

func (p *probes) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}

// send sends a probe on a goroutine of its own; its outcome comes on
// results (buffered: the goroutine never waits for a reader).
func (p *probes) send() {
	p.sent = time.Now()
	go func() {
		rctx, cancel := requestContext(p.ctx, p.m.requestTimeout)
		_, err := p.m.s.Client().Get(rctx, p.m.entry(p.key), clientv3.WithCountOnly())
		cancel()
		if err != nil && boundEnded(rctx) {
			err = errNoAnswer
		}
		p.results <- err
	}()
}

// failed takes a probe's outcome and returns the store failure that ends
// the wait, or nil after scheduling the next probe.
func (p *probes) failed(err error) error {
	switch {
	case err == nil:
		p.fails = 0
		p.timer.Reset(p.poll)
		return nil
	case p.ctx.Err() != nil:
		return nil // the Lock's end, not the probe's: lockMutex sees it
	case errors.Is(err, errNoAnswer):
		return p.m.unreachable(p.key, "probe while the Mutex waits", fmt.Errorf("%w (%s)", errNoAnswer, p.m.requestTimeout))
	case couldNotDecide(err):
		if p.fails == 0 {
			p.failingSince = p.sent
		}
		if time.Since(p.failingSince) >= p.m.requestTimeout {
			return p.m.unreachable(p.key, "probe while the Mutex waits", err)
		}
		p.fails++
		p.timer.Reset(readRetry.Delay(p.fails))
		return nil
	}
	// An answer (a refusal): etcd is there; Lock meets the same answer.
	p.fails = 0
	p.timer.Reset(p.poll)
	return nil
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
	rctx, rcancel := requestContext(ctx, m.requestTimeout)
	ttl, err := keepAliveOnce(rctx, c, id)
	rcancel()
	if err != nil {
		if storefail.Ended(ctx) == nil && (boundEnded(rctx) || couldNotDecide(err)) {
			return nil, unreachable(c, fmt.Errorf("confirm the session lease: %w", err))
		}
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
