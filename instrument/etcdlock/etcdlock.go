package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
	"github.com/lockgov/lockgov/instrument/lockvalue"
)

// BackendName is the value of the backend label and span attribute.
const BackendName = "etcd"

// DefaultPrefix is the etcd key prefix under which lock queues live.
const DefaultPrefix = "lockgov/lock/"

// DefaultRequestTimeout bounds each round trip to etcd that an Acquire
// makes (WithRequestTimeout): etcdctl's --command-timeout, and go-redis's
// DialTimeout, which is what makes a Redis that is down a store failure.
const DefaultRequestTimeout = 5 * time.Second

// errClientClosed is why an Acquire stopped when its Locker's client was
// closed under it (wrapped with instrument.ErrNotAcquired).
var errClientClosed = errors.New("etcdlock: the etcd client was closed")

// Locker takes locks on an etcd cluster. It is safe for concurrent use:
// every Acquire runs on a lease (and therefore a queue entry) of its own, so
// goroutines sharing a Locker never both hold a key.
type Locker struct {
	c      *clientv3.Client
	prefix string
	value  lockvalue.Writer
	pool   leasePool
	// revokes gives up, in the background, leases whose revoke did not
	// get through (revoker).
	revokes revoker
	// headWatchMax is the longest queue ahead of a waiter for which it
	// watches the whole queue (waitHead) instead of its predecessor alone
	// (waitTurn); tests lower it to exercise waitTurn.
	headWatchMax int64
	// cleanupBound is how long the cleanup after a failed Acquire may run
	// on a bound of its own: its revoke while the caller's context is live
	// (cleanupContext), and a watch etcd has not confirmed once its waiter
	// has left (watchKey). cleanupTimeout; tests raise it past anything
	// they wait for, so that only the caller's end can cut a cleanup short.
	cleanupBound time.Duration
	// afterPool is a test seam: it runs in a Release once the lease is
	// back in the pool, before the lease core ends it (lose ends it lost,
	// as the expiry timer would there).
	afterPool func(lose func())
	// requestTimeout bounds each round trip of an Acquire (0: the caller's
	// context only): WithRequestTimeout.
	requestTimeout time.Duration
	queueWatches   atomic.Int64 // waits that watched the whole queue, for tests
	watching       atomic.Int64 // waits whose first watch is in place, for tests
}

// headWatchMax is the longest queue ahead of a waiter for which it watches
// the whole queue: each deletion in a queue reaches at most this many
// waiters' watches (none of which sends a request), the price of a handoff
// without a read. Past it, waiters watch their predecessor only, as etcd's
// concurrency.Mutex does, and a handoff costs a read.
const headWatchMax = 16

// Option configures a Locker.
type Option interface {
	apply(*options)
}

type options struct {
	prefix         string
	service        string
	instance       string
	requestTimeout time.Duration
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithPrefix sets the etcd key prefix of lock queues (default
// DefaultPrefix). Lockers that must exclude each other need the same prefix.
func WithPrefix(p string) Option {
	return optionFunc(func(o *options) { o.prefix = p })
}

// WithService names the service in lock values (default: the executable name).
func WithService(name string) Option {
	return optionFunc(func(o *options) { o.service = name })
}

// WithInstance names this instance in lock values (default: the host name).
func WithInstance(name string) Option {
	return optionFunc(func(o *options) { o.instance = name })
}

// WithRequestTimeout bounds each round trip to etcd that Acquire makes
// (default DefaultRequestTimeout): the lease grant, the transaction that
// puts the queue entry, and each read of the queue while it waits; not the
// wait itself (the watch for the entries ahead to go), which lasts as the
// wait strategy says. A round trip that etcd has not answered when its
// bound ends, while the caller's context still has time, fails the Acquire
// with a store failure (see the package doc, "Store failure"), as does one
// that etcd answers with codes.Unavailable (no leader, request timed out,
// leader changed): without it a clientv3 request waits for an unreachable
// cluster until the caller's context ends, and the caller learns only that
// it gave up. 0 leaves only the caller's context to bound them, as before
// the option existed; a negative d is an error from New (and FromMutex).
//
// It is the one Option that FromMutex takes too (default 0 there: see
// MutexLocker, "Store failure").
func WithRequestTimeout(d time.Duration) Option { return requestTimeout(d) }

// requestTimeout is WithRequestTimeout's Option; FromMutex recognises it
// by its type.
type requestTimeout time.Duration

func (d requestTimeout) apply(o *options) { o.requestTimeout = time.Duration(d) }

// New returns a Locker on c.
func New(c *clientv3.Client, opts ...Option) (*Locker, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: etcdlock.New: nil client", instrument.ErrInvalidOption)
	}
	o := options{prefix: DefaultPrefix, requestTimeout: DefaultRequestTimeout}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	if o.requestTimeout < 0 {
		return nil, fmt.Errorf("%w: etcdlock: negative request timeout %s", instrument.ErrInvalidOption, o.requestTimeout)
	}
	if o.prefix == "" {
		return nil, fmt.Errorf("%w: etcdlock: empty key prefix", instrument.ErrInvalidOption)
	}
	if strings.IndexByte(o.prefix, 0) >= 0 {
		return nil, fmt.Errorf("%w: etcdlock: key prefix %q contains a NUL byte, the queue separator", instrument.ErrInvalidOption, o.prefix)
	}
	value, err := lockvalue.NewWriter(o.service, o.instance)
	if err != nil {
		return nil, err
	}
	l := &Locker{c: c, prefix: o.prefix, value: value, headWatchMax: headWatchMax, cleanupBound: cleanupTimeout, requestTimeout: o.requestTimeout}
	if o.requestTimeout > 0 {
		// The revoke after a failed Acquire is a round trip too: one that
		// failed because etcd did not answer should not wait longer for
		// the next (the background revoker takes over).
		l.cleanupBound = min(l.cleanupBound, o.requestTimeout)
	}
	return l, nil
}

// Backend returns "etcd".
func (l *Locker) Backend() string { return BackendName }

// QueuePrefix returns the etcd prefix under which the entries of key's
// queue live: the holder is the entry with the lowest create revision.
func (l *Locker) QueuePrefix(key string) string { return l.prefix + key + "\x00" }

// leaseTTL converts a lock TTL to whole lease seconds, rounded up, at least 1.
func leaseTTL(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}

// Acquire takes the lock on key as the options say. See instrument.Locker
// and the package documentation.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...instrument.AcquireOption) (instrument.Lease, error) {
	cfg, err := acquireConfig(key, opts)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, acquireErr(ctx, key, nil)
	}
	// Closing the client ends the wait at once: no request through it can
	// get through again, and clientv3 retries each for seconds before it
	// says so. Nothing of the lease lives on this context (its keepalive and
	// own-key watch run on the lease's own).
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(l.c.Ctx(), func() { cancel(errClientClosed) })()
	for {
		rctx, rcancel := l.request(ctx)
		id, ttl, sent, pooled, err := l.pool.get(rctx, l.c, leaseTTL(cfg.TTL), !cfg.NoWatchdog)
		rcancel()
		if err != nil {
			return nil, l.requestErr(ctx, rctx, key, "grant lease", err)
		}
		st := newLeaseState(l, key, id, ttl, sent, &cfg)
		a := &acquirer{l: l, st: st, cfg: &cfg}
		fence, err := a.run(ctx)
		if err == nil {
			err = st.checkLive()
		}
		if a.waiting {
			cfg.Observer.Waiting(false)
		}
		if err != nil {
			st.abandon(ctx, err)
			if pooled && errors.Is(err, rpctypes.ErrLeaseNotFound) {
				continue // an idle lease was revoked meanwhile: grant a new one
			}
			return nil, err
		}
		return st.acquired(fence), nil
	}
}

// acquireConfig checks key and applies opts: what every Acquire, of a
// Locker or a MutexLocker, starts with.
func acquireConfig(key string, opts []instrument.AcquireOption) (instrument.AcquireConfig, error) {
	if err := instrument.ValidateKey(key); err != nil {
		return instrument.AcquireConfig{}, err
	}
	return instrument.ApplyAcquireOptions(opts...)
}

// acquirer is the state of one Acquire call between the lease grant and the
// moment the lock is held or given up.
type acquirer struct {
	l       *Locker
	st      *leaseState
	cfg     *instrument.AcquireConfig
	waiting bool
	ready   bool // counted in Locker.watching
	// queuedAt is when queue put the entry, the lock value's queued_at_ms.
	// Not the lease's start: a pooled lease started at its last renewal.
	queuedAt time.Time
	// readErr is the last queue read (recheck) that failed while the wait
	// went on: no leader, a lost connection. A waiter keeps its place
	// through such failures and reads again after readRetry's back-off (or
	// sooner, at the next poll or event); the error is told if the wait
	// then ends at the caller's deadline, unless a read worked since: an
	// outage long over did not keep the waiter from its turn.
	readErr error
	// readFails counts the reads that failed in a row: the attempt number
	// of readRetry's back-off.
	readFails int
	// readSent is when the last read was sent, failingSince when the first
	// read of the current run of failed ones was (readFailed).
	readSent, failingSince time.Time
	// watchStop ends with the caller's context or with our lease: a wait
	// stops at either, and so does its wait for etcd to confirm a watch,
	// which etcd may never do (Locker.watch).
	watchStop context.Context
}

// readRetry is the back-off between reads of the queue that keep failing.
// A failed read may have been the one that the last event (the release that
// was our turn) asked for, and no later event need come: without a retry of
// its own the waiter would read again only at its next poll, sitting on a
// free lock, with everyone queued behind it, for up to a poll interval. The
// first retry comes soon, as a leader election or a reconnection is often
// over in tens of milliseconds. Every read restarts the poll, so the retries
// replace polls rather than add to them; the cap (half the default poll
// interval) bounds a long outage to two reads a second per waiter, and the
// jitter keeps waiters that failed together from retrying together.
var readRetry = instrument.ExponentialBackoff(20*time.Millisecond, instrument.DefaultPollInterval/2)

// readFailed returns the error that ends the wait after err, a failed
// recheck, or nil for a failed read the wait goes on after (then remembered
// for waitErr, and retry is set to read again after the next back-off
// delay). A wait whose context or session has ended returns waitErr, as
// every other ended wait does, whatever the read's own error: this is the
// one place that decides, so a deadline that passes while the read fails
// cannot slip out as a bare transport error. A closed client ends the wait
// with the read's error: no read will get through again. So does a failed
// read that requestErr marked a store failure (no answer, no leader) when
// the reads have failed for a whole request timeout, counted from the send
// of the first in the run (one read that its bound ended is such a run):
// a shorter outage, a leader election, keeps the waiter's place.
func (a *acquirer) readFailed(ctx context.Context, err error, retry *time.Timer) error {
	if storefail.Ended(ctx) != nil || a.st.Context().Err() != nil {
		return a.waitErr(ctx)
	}
	if a.l.c.Ctx().Err() != nil {
		return err
	}
	if a.readFails == 0 {
		a.failingSince = a.readSent
	}
	if a.l.requestTimeout > 0 && storefail.Unavailable(err) && time.Since(a.failingSince) >= a.l.requestTimeout {
		// etcd has not answered a read for a whole request timeout (no
		// leader, out of reach): a store failure, which Govern's policy
		// decides on, not a reason to wait on.
		return err
	}
	a.readErr = err
	a.readFails++
	retry.Reset(readRetry.Delay(a.readFails))
	return nil
}

// readWorked ends a run of failed reads: the next failure backs off from
// the start again, and a deadline is no longer blamed on them.
func (a *acquirer) readWorked(retry *time.Timer) {
	a.readErr, a.readFails = nil, 0
	retry.Stop()
}

// newRetryTimer returns a stopped timer for readFailed to set.
func newRetryTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

func (a *acquirer) startWaiting() {
	if !a.waiting {
		a.cfg.Observer.Waiting(true)
	}
	a.waiting = true
}

// watchReady counts this wait in Locker.watching the first time its watch is
// in place: a deletion from then on reaches it through the watch. Tests wait
// for it instead of sleeping.
func (a *acquirer) watchReady() {
	if !a.ready {
		a.ready = true
		a.l.watching.Add(1)
	}
}

func (a *acquirer) attempted(ok bool) {
	a.cfg.Observer.Attempt(ok)
}

// value is the lock value: the holder's metadata as JSON. The fence is not
// in it: it is the key's create_revision, which etcd stores with every key.
func (a *acquirer) value(queuedAt, acquiredAt time.Time) string {
	var b strings.Builder
	call := lockvalue.Call{TraceID: a.cfg.TraceID, Labels: a.cfg.Meta, TTL: a.cfg.TTL}
	b.Grow(a.l.value.Size(call, 2) + 1) // and the closing brace
	a.l.value.Begin(&b, call)
	lockvalue.AppendTime(&b, lockvalue.QueuedAt, queuedAt)
	if !acquiredAt.IsZero() {
		lockvalue.AppendTime(&b, lockvalue.AcquiredAt, acquiredAt)
	}
	b.WriteByte('}')
	return b.String()
}

func (a *acquirer) run(ctx context.Context) (int64, error) {
	if a.cfg.Wait == instrument.WaitDeadline {
		return a.queue(ctx)
	}
	return a.try(ctx)
}

// emptyQueue is true when no entry exists under the queue prefix: a range
// compare on an empty range compares a zero KeyValue.
func (a *acquirer) emptyQueue() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(a.st.pfx), "=", 0).WithPrefix()
}

// try makes fail-fast and retry attempts: put an entry only if the queue is
// empty, so these callers never queue behind waiters.
func (a *acquirer) try(ctx context.Context) (int64, error) {
	st := a.st
	for attempt := 1; ; attempt++ {
		now := time.Now()
		rctx, rcancel := a.l.request(ctx)
		resp, err := a.l.c.Txn(rctx).If(a.emptyQueue()).
			Then(clientv3.OpPut(st.own, a.value(now, now), clientv3.WithLease(st.id))).
			Commit()
		rcancel()
		if err != nil {
			return 0, a.l.requestErr(ctx, rctx, st.key, "put the lock entry", err)
		}
		a.attempted(resp.Succeeded)
		if resp.Succeeded {
			st.startOwnWatch(resp.Header.Revision+1, watchGrace)
			return resp.Header.Revision, nil
		}
		if a.cfg.Wait == instrument.WaitFailFast {
			return 0, fmt.Errorf("etcdlock: acquire %q: %w", st.key, instrument.ErrNotAcquired)
		}
		if attempt >= a.cfg.MaxAttempts {
			return 0, fmt.Errorf("etcdlock: acquire %q after %d attempts: %w", st.key, attempt, instrument.ErrNotAcquired)
		}
		a.startWaiting()
		t := time.NewTimer(a.cfg.Backoff.Delay(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("etcdlock: acquire %q: %w: %w", st.key, instrument.ErrNotAcquired, context.Cause(ctx))
		case <-st.Context().Done():
			t.Stop()
			return 0, fmt.Errorf("etcdlock: acquire %q: session ended while retrying: %w", st.key, context.Cause(st.Context()))
		}
	}
}

// queue enters the key's queue and waits, in create-revision order, until
// every earlier entry is gone: by watching the whole queue while it is
// short (waitHead), its predecessor otherwise (waitTurn).
func (a *acquirer) queue(ctx context.Context) (int64, error) {
	st := a.st
	now := time.Now()
	a.queuedAt = now
	rctx, rcancel := a.l.request(ctx)
	resp, err := a.l.c.Txn(rctx).If(a.emptyQueue()).
		Then(clientv3.OpPut(st.own, a.value(now, now), clientv3.WithLease(st.id))).
		Else(
			clientv3.OpGet(st.pfx, clientv3.WithLastCreate()...),
			clientv3.OpPut(st.own, a.value(now, time.Time{}), clientv3.WithLease(st.id)),
		).Commit()
	rcancel()
	if err != nil {
		return 0, a.l.requestErr(ctx, rctx, st.key, "put the queue entry", err)
	}
	myRev := resp.Header.Revision
	a.attempted(resp.Succeeded)
	// Watch our own entry: if it is deleted while we wait (our session lease
	// expired, or an operator deleted it), we stop waiting. A lock taken at
	// once watches after watchGrace, like try's.
	if resp.Succeeded {
		st.startOwnWatch(myRev+1, watchGrace)
		return myRev, nil
	}
	st.startOwnWatch(myRev+1, 0)
	ahead := resp.Responses[0].GetResponseRange() // read before our put: all of it is ahead of us
	if len(ahead.Kvs) == 0 {                      // the queue emptied between compare and get: impossible in one txn
		return 0, fmt.Errorf("etcdlock: acquire %q: queue read returned no predecessor", st.key)
	}
	a.startWaiting()
	// A waiter whose lease ends (it expired while etcd was unreachable, or
	// our entry was deleted) stops waiting, also while it waits for a watch
	// that etcd has not confirmed: its place in the queue is gone.
	watchStop, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	defer context.AfterFunc(st.Context(), stopWatches)()
	a.watchStop = watchStop
	if ahead.Count <= a.l.headWatchMax {
		a.l.queueWatches.Add(1)
		if rev, done, err := a.waitHead(ctx, myRev); done {
			return rev, err
		}
	}
	return a.waitTurn(ctx, myRev, ahead.Kvs[0], myRev)
}

// waitHead waits for our turn by watching the whole queue, and is used when
// at most headWatchMax entries are ahead of ours. One watch on the queue
// prefix delivers every deletion in it, ours included, in revision order.
// Once the watch is created, one read (at a revision the watch covers from)
// lists the entries ahead of ours; from then on the waiter strikes them off
// as their deletions arrive, and the deletion that strikes off the last one
// is the handoff: at that revision no older entry was left and ours existed,
// since a deletion of ours, or of an entry we did not know, would have come
// first in the same stream (entries created later are never ahead of us). So
// a handoff costs the holder's delete and one watch event, no read; waitTurn's
// re-check reads what this stream has already said. Deletions at or below
// the read's revision are covered by it and skipped, which also skips a
// lagging member's replays. The poll re-reads, as waitTurn's does.
//
// done is false when the watch failed (no leader, compaction, connection
// lost): waitTurn takes over, with a fresh watch and a re-check.
func (a *acquirer) waitHead(ctx context.Context, myRev int64) (rev int64, done bool, err error) {
	st := a.st
	wch, wcancel, err := a.l.waitWatch(a.watchStop, st.pfx, clientv3.WithPrefix(), clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	if err != nil {
		return 0, true, a.watchFailed(ctx, "watch the queue", err)
	}
	defer wcancel()
	poll := time.NewTimer(a.cfg.PollInterval)
	defer poll.Stop()
	retry := newRetryTimer()
	defer retry.Stop()
	var (
		ahead      = map[string]struct{}{} // entries older than ours as of readRev
		readRev    int64                   // 0 until the first read
		createdRev int64
	)
	for {
		select {
		case wr, ok := <-wch:
			switch {
			case !ok || wr.Err() != nil || wr.Canceled:
				return 0, false, nil
			case wr.Created:
				createdRev = wr.Header.Revision
			default:
				if readRev == 0 {
					// Before the first read the entries ahead are not known,
					// and an empty set must not read as "none left". (The
					// read follows the created response, which comes first;
					// if it failed, the retry reads.)
					continue
				}
				for _, ev := range wr.Events {
					if ev.Type != clientv3.EventTypeDelete || ev.Kv.ModRevision <= readRev {
						continue
					}
					if string(ev.Kv.Key) == st.own {
						return 0, true, a.lostWhileWaiting(ctx)
					}
					delete(ahead, string(ev.Kv.Key))
				}
				if len(ahead) > 0 {
					continue
				}
				a.attempted(true)
				rev, err := a.takeOver(ctx, myRev)
				return rev, true, err
			}
		case <-poll.C:
		case <-retry.C:
		case <-ctx.Done():
			return 0, true, a.waitErr(ctx)
		case <-st.Context().Done():
			return 0, true, a.waitErr(ctx)
		}
		poll.Reset(a.cfg.PollInterval)
		resp, err := a.recheck(ctx, myRev, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			if err := a.readFailed(ctx, err, retry); err != nil {
				return 0, true, err
			}
			continue // read again at the retry, or the next poll or deletion
		}
		a.readWorked(retry)
		switch {
		case resp.Succeeded:
			rev, err := a.takeOver(ctx, myRev)
			return rev, true, err
		case ownGone(resp, myRev):
			return 0, true, a.lostWhileWaiting(ctx)
		}
		if resp.Header.Revision < createdRev {
			// A linearizable read is never behind a revision a watch has
			// reported; if it were, deletions between the two would be
			// missed. Let waitTurn, which needs no such order, take over.
			return 0, false, nil
		}
		clear(ahead)
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			ahead[string(kv.Key)] = struct{}{}
		}
		readRev = resp.Header.Revision
		if createdRev != 0 {
			a.watchReady()
		}
	}
}

// recheck reads, in one read-only transaction, whether our entry (create
// revision myRev) is the oldest in the queue. If not, its responses are our
// entry (keys only) and the entries ahead of ours as aheadOpts select them.
// Its error is the read's; readFailed decides what it means for the wait.
func (a *acquirer) recheck(ctx context.Context, myRev int64, aheadOpts ...clientv3.OpOption) (*clientv3.TxnResponse, error) {
	st := a.st
	a.readSent = time.Now()
	rctx, rcancel := a.l.request(ctx)
	defer rcancel()
	resp, err := a.l.c.Txn(rctx).If(
		clientv3.Compare(clientv3.CreateRevision(st.own), "=", myRev),
		clientv3.Compare(clientv3.CreateRevision(st.pfx), ">", myRev-1).WithPrefix(),
	).Else(
		clientv3.OpGet(st.own, clientv3.WithKeysOnly()),
		clientv3.OpGet(st.pfx, append(aheadOpts, clientv3.WithMaxCreateRev(myRev-1))...),
	).Commit()
	if err != nil {
		return nil, a.l.requestErr(ctx, rctx, st.key, "read the queue", err)
	}
	a.attempted(resp.Succeeded)
	return resp, nil
}

// ownGone reports whether a failed recheck found our entry gone (or
// recreated by someone else).
func ownGone(resp *clientv3.TxnResponse, myRev int64) bool {
	own := resp.Responses[0].GetResponseRange().Kvs
	return len(own) == 0 || own[0].CreateRevision != myRev
}

// takeOver ends a wait that found the lock ours: the acquisition time is
// recorded in the lock value afterwards, off the handoff's path.
func (a *acquirer) takeOver(ctx context.Context, myRev int64) (int64, error) {
	if a.st.Context().Err() != nil {
		return 0, a.waitErr(ctx)
	}
	a.st.stamp <- a.value(a.queuedAt, time.Now())
	return myRev, nil
}

// lostWhileWaiting ends a wait whose own queue entry was deleted.
func (a *acquirer) lostWhileWaiting(ctx context.Context) error {
	a.st.core.Lose(fmt.Errorf("%w: %q: queue entry deleted while waiting", instrument.ErrLockLost, a.st.key))
	return a.waitErr(ctx)
}

// waitTurn waits until no entry created before myRev is left. pred is the
// newest such entry as of revision readRev. Entries created later have
// higher revisions, so the entries ahead of us only ever go away, and a
// release wakes only the waiter right behind it.
//
// When pred is deleted the waiter checks in one read-only transaction (a
// linearizable read, no raft write) that its own entry still exists with
// its create revision and that no older entry is left. The deletion alone
// does not say so: entries older than pred may remain (pred gave up), and
// our own entry may have been deleted before pred's (our lease revoked, or
// expired while the process was paused) with the own-key watch's event not
// yet delivered; taking over then would make two holders. A handoff
// therefore costs the holder's delete, one watch event and one read; the
// acquisition time is recorded in the lock value afterwards, off the
// handoff's path.
func (a *acquirer) waitTurn(ctx context.Context, myRev int64, pred *mvccpb.KeyValue, readRev int64) (int64, error) {
	st := a.st
	var (
		watched string
		wch     clientv3.WatchChan
		wcancel context.CancelFunc = func() {}
	)
	defer func() { wcancel() }()
	poll := time.NewTimer(a.cfg.PollInterval)
	defer poll.Stop()
	// A failed read leaves the watch on pred, which may be deleted already
	// (the release we failed to read after): the retry reads again.
	retry := newRetryTimer()
	defer retry.Stop()
	for {
		if watched != string(pred.Key) {
			// A watch from the current revision is synced at once; one from
			// an older revision would be delivered only by etcd's 100 ms
			// resync of unsynced watchers. "Current" is the serving member's:
			// if it is ahead of readRev (the created response says so),
			// re-check; if it lags behind, the watch replays events up to
			// readRev, which the read already covers and which are skipped.
			wcancel()
			if storefail.Ended(ctx) != nil || st.Context().Err() != nil {
				return 0, a.waitErr(ctx)
			}
			watched = string(pred.Key)
			var err error
			wch, wcancel, err = a.l.waitWatch(a.watchStop, watched, clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
			if err != nil {
				return 0, a.watchFailed(ctx, "watch the entry ahead", err)
			}
		}
		recheck := false
		select {
		case wr, ok := <-wch:
			switch {
			case !ok || wr.Err() != nil || wr.Canceled:
				watched, recheck = "", true
				if ctx.Err() == nil {
					// The watch ended (no leader, connection lost): do not
					// spin; the poll timer and a fresh watch take over.
					if err := sleepCtx(ctx, st.Context(), 20*time.Millisecond); err != nil {
						return 0, a.waitErr(ctx)
					}
				}
			case wr.Created:
				recheck = wr.Header.Revision > readRev
				a.watchReady()
			default:
				for _, ev := range wr.Events {
					// A reused lease gives the predecessor's entry the name
					// of an earlier entry of its; that entry's deletion,
					// replayed by a lagging member, is not this one's.
					if ev.Type == clientv3.EventTypeDelete && ev.Kv.ModRevision > readRev {
						recheck = true
					}
				}
			}
		case <-poll.C:
			recheck = true
		case <-retry.C:
			recheck = true
		case <-ctx.Done():
			return 0, a.waitErr(ctx)
		case <-st.Context().Done():
			return 0, a.waitErr(ctx)
		}
		if !recheck {
			continue
		}
		poll.Reset(a.cfg.PollInterval)
		// Our turn if our entry still exists and none older is left. Read
		// only: the acquisition time is written after the handoff.
		resp, err := a.recheck(ctx, myRev, clientv3.WithLastCreate()...)
		if err != nil {
			if err := a.readFailed(ctx, err, retry); err != nil {
				return 0, err
			}
			continue // read again at the retry, or the next poll or event
		}
		a.readWorked(retry)
		switch {
		case resp.Succeeded:
			return a.takeOver(ctx, myRev)
		case ownGone(resp, myRev):
			return 0, a.lostWhileWaiting(ctx)
		}
		kvs := resp.Responses[1].GetResponseRange().Kvs
		if len(kvs) == 0 {
			// Only possible if our own entry was recreated; treat as lost.
			return 0, fmt.Errorf("etcdlock: acquire %q: inconsistent queue at revision %d", st.key, resp.Header.Revision)
		}
		pred, readRev = kvs[0], resp.Header.Revision
	}
}

// watch opens a watch on key (requiring a leader) that ends when the returned
// cancel is called; the caller also selects on stop.Done itself (or on what
// ends stop: a waiter's context and its lease).
//
// The watch is not cancelled through stop while etcd has not yet confirmed
// its creation. clientv3 (v3.7.3, watch.go) keeps a new watch in its stream's
// resume queue until the created response arrives; a watch cancelled there
// leaves a nil slot that the stream's "no watchers left" check counts, so
// the shared gRPC watch stream (run, serveWatchClient, the propagateCancel
// goroutine of its context, and the server's Watch, recvLoop and sendLoop)
// stays open until the client is closed. Client.Watch returns only once the
// watch is created, so a cancel after it returns is safe. Only when stop has
// ended and etcd does not answer within grace (the Locker's cleanupBound: a
// lost connection) is a pending watch cancelled, accepting that leak over a
// stuck caller.
//
// The caller does not wait for that, though: etcd may never confirm the
// watch (unreachable, or the connection went half-open after the waiter's
// put), and a waiter whose context has ended must return then, not
// grace later. Client.Watch runs on a goroutine of its own; once stop
// ends, watch returns at once a nil channel (never ready: the caller's
// select takes stop.Done) and a no-op cancel, and that goroutine cancels
// the watch when etcd confirms it, or after grace.
func (l *Locker) watch(stop context.Context, key string, opts ...clientv3.OpOption) (clientv3.WatchChan, context.CancelFunc) {
	wch, cancel, _ := watchKey(l.c, stop, l.cleanupBound, 0, key, opts...)
	return wch, cancel
}

// waitWatch is watch for a waiter: its creation is a round trip of the
// Acquire, bounded by the request timeout. If etcd has not confirmed the
// watch by then (unreachable: a watch is not created while no connection
// is ready), it returns errNoAnswer, and the pending watch is left as when
// stop ends.
func (l *Locker) waitWatch(stop context.Context, key string, opts ...clientv3.OpOption) (clientv3.WatchChan, context.CancelFunc, error) {
	return watchKey(l.c, stop, l.cleanupBound, l.requestTimeout, key, opts...)
}

// watchFailed is the Acquire's error for a waiter's watch, what, that etcd
// did not confirm within the request timeout (err): the wait's end if its
// context or session has ended meanwhile, a store failure otherwise.
func (a *acquirer) watchFailed(ctx context.Context, what string, err error) error {
	if storefail.Ended(ctx) != nil || a.st.Context().Err() != nil {
		return a.waitErr(ctx)
	}
	return a.l.unreachable(a.st.key, fmt.Errorf("%s: %w (%s)", what, err, a.l.requestTimeout))
}

// watchKey is Locker.watch on any client, with grace for cleanupBound. A
// bound above 0 limits how long it waits for etcd to confirm the watch:
// past it, it returns errNoAnswer (and leaves the pending watch as when
// stop ends).
func watchKey(c *clientv3.Client, stop context.Context, grace, bound time.Duration, key string, opts ...clientv3.OpOption) (clientv3.WatchChan, context.CancelFunc, error) {
	if stop.Err() != nil {
		return nil, func() {}, nil
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.WithoutCancel(stop)))
	created := make(chan clientv3.WatchChan)
	gone := make(chan struct{}) // closed when the caller stopped waiting
	go func() {
		wch := c.Watch(wctx, key, opts...)
		select {
		case created <- wch:
		case <-gone:
			cancel() // confirmed (or closed) after the caller left: safe now
		}
	}()
	var expired <-chan time.Time
	if bound > 0 {
		t := time.NewTimer(bound)
		defer t.Stop()
		expired = t.C
	}
	select {
	case wch := <-created:
		return wch, cancel, nil
	case <-stop.Done():
		close(gone)
		time.AfterFunc(grace, cancel)
		return nil, func() {}, nil
	case <-expired:
		close(gone)
		time.AfterFunc(grace, cancel)
		return nil, func() {}, errNoAnswer
	}
}

// waitErr explains why waiting stopped: the caller's context or the end of
// our own session.
func (a *acquirer) waitErr(ctx context.Context) error {
	if err := storefail.Ended(ctx); err != nil {
		if a.readErr != nil {
			return fmt.Errorf("etcdlock: acquire %q: %w: %w (the last read of the queue failed: %v)", a.st.key, instrument.ErrNotAcquired, err, a.readErr)
		}
		return fmt.Errorf("etcdlock: acquire %q: %w: %w", a.st.key, instrument.ErrNotAcquired, err)
	}
	// The lease's own cause, not context.Cause: a Lose that found the
	// lease already ending (its session's end on another goroutine)
	// returns before that goroutine has cancelled the context, whose
	// cause is then still nil.
	return fmt.Errorf("etcdlock: acquire %q: stopped waiting, own session ended: %w", a.st.key, a.st.core.Cause())
}

// errNoAnswer is why a round trip of an Acquire failed when etcd had not
// answered it when the request timeout ended.
var errNoAnswer = errors.New("no answer within the request timeout")

// request returns the context of one round trip of an Acquire: ctx, bounded
// by the request timeout (WithRequestTimeout) if there is one. Its cause is
// errNoAnswer once that bound has ended it (boundEnded), also after the
// returned cancel has run: callers cancel it before they look at the error.
func (l *Locker) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return requestContext(ctx, l.requestTimeout)
}

// requestContext is ctx bounded by d (none when d is 0), ended by that
// bound with cause errNoAnswer: Locker.request and MutexLocker's.
func requestContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, d, errNoAnswer)
}

// boundEnded reports whether rctx, a context from request, was ended by its
// own bound: not by its cancel (which every round trip calls when it
// returns, answered or not), nor by the caller's context.
func boundEnded(rctx context.Context) bool {
	return errors.Is(context.Cause(rctx), errNoAnswer)
}

// requestErr is the Acquire's error for the round trip what on key, sent on
// rctx (request: ctx with the request timeout), that failed with err:
//
//   - the caller's context has ended: ErrNotAcquired with its cause
//     (acquireErr), whatever err says;
//   - rctx ended by its own bound (boundEnded), or etcd answered that it
//     could not decide (couldNotDecide): the store out of reach
//     (unreachable). The deadline of rctx is not wrapped, only told: it is
//     not the caller's, and errors.Is(err, context.DeadlineExceeded) would
//     say it was;
//   - otherwise err as it is: an answer (permission denied, a compaction)
//     that came within the bound, whether or not rctx has been cancelled
//     since.
func (l *Locker) requestErr(ctx, rctx context.Context, key, what string, err error) error {
	if storefail.Ended(ctx) != nil {
		return acquireErr(ctx, key, err)
	}
	switch {
	case boundEnded(rctx):
		return l.unreachable(key, fmt.Errorf("%s: %w (%s): %v", what, errNoAnswer, l.requestTimeout, err))
	case couldNotDecide(err):
		return l.unreachable(key, fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("etcdlock: acquire %q: %s: %w", key, what, err)
}

// unreachable is the Acquire's error on key for err, a round trip that etcd
// did not decide: marked for storefail (Govern's store-failure policy).
// Not ErrNotAcquired, as a redislock transport error is not: nobody was
// found holding the lock. What the mark wraps names the endpoints, never
// the key: the store-failure log line prints it.
func (l *Locker) unreachable(key string, err error) error {
	return fmt.Errorf("etcdlock: acquire %q: %w", key, unreachable(l.c, err))
}

// unreachable marks err, a round trip on c that etcd did not decide, for
// storefail, naming c's endpoints (never a key).
func unreachable(c *clientv3.Client, err error) error {
	return storefail.Unreachable(fmt.Errorf("etcd %s: %w", endpoints(c), err))
}

// couldNotDecide reports whether err is etcd's (or gRPC's) codes.Unavailable:
// no leader, leader changed, request timed out (also due to a leader's
// failure or a lost connection), server stopped, unhealthy cluster, or a
// connection that broke under the request. etcd has not said what became of
// the request; a later one may well get through.
func couldNotDecide(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Unavailable
}

// endpoints names c's endpoints for an error: their hosts, without any
// user information.
func endpoints(c *clientv3.Client) string {
	eps := c.Endpoints()
	hosts := make([]string, 0, len(eps))
	for _, ep := range eps {
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			ep = u.Host
		}
		if i := strings.LastIndexByte(ep, '@'); i >= 0 {
			ep = ep[i+1:]
		}
		hosts = append(hosts, ep)
	}
	return strings.Join(hosts, ",")
}

// acquireErr is an Acquire's error for a failed request: ErrNotAcquired with
// the context's cause when the caller's context has ended, whatever error
// that produced (etcd answers a request whose deadline passed on the server
// with its own "request timed out", not with the context's error, and that
// answer can come before our context's timer has fired: storefail.Ended).
func acquireErr(ctx context.Context, key string, err error) error {
	if cerr := storefail.Ended(ctx); cerr != nil {
		return fmt.Errorf("etcdlock: acquire %q: %w: %w", key, instrument.ErrNotAcquired, cerr)
	}
	return fmt.Errorf("etcdlock: acquire %q: %w", key, err)
}

// sleepCtx sleeps d unless either context ends first.
func sleepCtx(a, b context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-a.Done():
		return context.Cause(a)
	case <-b.Done():
		return context.Cause(b)
	}
}
