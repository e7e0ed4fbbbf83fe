package redislock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
	"github.com/lockgov/lockgov/instrument/lockvalue"
)

// BackendName is the value of the backend label and span attribute.
const BackendName = "redis"

// DefaultFenceRetention is how long a fence counter outlives the last lease
// on its key. See WithFenceRetention.
const DefaultFenceRetention = 10 * time.Minute

// Locker takes locks on one Redis deployment (single node, Sentinel or
// Cluster, through redis.UniversalClient), or over a majority of independent
// primaries (NewQuorum). It is safe for concurrent use.
type Locker struct {
	store     store
	notify    notifier
	local     localQueue
	retention time.Duration
	waiterTTL time.Duration // how long a queue entry outlives its waiter's last attempt
	// confirmHandoffs: a handoff is confirmed by an acquire attempt of the
	// waiter's own before the lease is granted (WithReplicaAcks: the
	// release that wrote it waited for no replica).
	confirmHandoffs bool
	value           lockvalue.Writer
	// lid names this Locker's own release channels: a handoff is published
	// on the key's channel + ":" + lid, so only the process whose waiter
	// got the lock wakes (see notifier).
	lid string
	// leaving holds a token per leave.lua try in flight in the background;
	// pendingLeaves counts the background leaves (see leave).
	leaving       chan struct{}
	pendingLeaves atomic.Int64
	// cluster: the client is a ClusterClient, which follows MOVED and ASK
	// itself; one that reaches the caller is a resharding that outran
	// its redirects. Any other client's is a misconfiguration (movesSlot).
	cluster bool
}

// New returns a Locker on c. The client should have ContextTimeoutEnabled
// set, so that a call never outlives the deadline of its context.
func New(c redis.UniversalClient, opts ...Option) (*Locker, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: redislock.New: nil client", instrument.ErrInvalidOption)
	}
	o, err := applyNewOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := o.acks.checkClient(c); err != nil {
		return nil, err
	}
	send := newCombiner(c, o.acks)
	n := node{c: c, send: send, waiterTTL: o.waiterTTL, acks: o.acks}
	var s store = n
	if o.fair {
		s = fairNode{node: n, waiterTTL: o.waiterTTL}
	}
	return newLocker(c, s, o)
}

// newLocker completes a Locker on store s; c carries its release
// notifications.
func newLocker(c redis.UniversalClient, s store, o options) (*Locker, error) {
	value, err := lockvalue.NewWriter(o.service, o.instance)
	if err != nil {
		return nil, err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	lid := hex.EncodeToString(id[:])
	done := make(chan struct{})
	_, cluster := c.(*redis.ClusterClient)
	return &Locker{
		cluster:   cluster,
		store:     s,
		notify:    notifier{c: c, idle: o.idleTimeout, health: healthInterval, suffix: ":" + lid, done: done},
		local:     localQueue{closed: done},
		lid:       lid,
		leaving:   make(chan struct{}, maxLeaving),
		retention: o.retention,
		waiterTTL: o.waiterTTL,
		value:     value,

		confirmHandoffs: o.acks.on(),
	}, nil
}

// Backend returns "redis".
func (l *Locker) Backend() string { return BackendName }

// Acquire takes the lock on key as the options say. See instrument.Locker.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...instrument.AcquireOption) (instrument.Lease, error) {
	if err := instrument.ValidateKey(key); err != nil {
		return nil, err
	}
	keys, err := keysFor(key)
	if err != nil {
		return nil, err
	}
	cfg, err := instrument.ApplyAcquireOptions(opts...)
	if err != nil {
		return nil, err
	}
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("redislock: acquire %q: %w", key, err)
	}
	if l.notify.isClosed() {
		return nil, fmt.Errorf("redislock: acquire %q: %w", key, ErrClosed)
	}
	r := &request{
		keys:     keys,
		tok:      newToken(),
		ttl:      cfg.TTL,
		meta:     l.meta(&cfg),
		fenceTTL: cfg.TTL + l.retention,
		once:     cfg.Wait == instrument.WaitFailFast,
		lid:      l.lid,
		owner:    l,
	}

	// Deadline waiters of this Locker take turns locally, unless the store
	// says otherwise (Fair); the one whose turn it is contends in Redis and
	// keeps the turn while it holds the lease.
	waiting := false
	startWaiting := func() {
		if !waiting {
			cfg.Observer.Waiting(true)
		}
		waiting = true
	}
	var leaveQueue func()
	if cfg.Wait == instrument.WaitDeadline && l.store.takesTurns() {
		if leaveQueue, err = l.local.enter(ctx, key, startWaiting); err != nil {
			if waiting {
				cfg.Observer.Waiting(false)
			}
			return nil, fmt.Errorf("redislock: acquire %q: %w: %w", key, instrument.ErrNotAcquired, err)
		}
	}
	var w *waiter
	// mustLeave: this Acquire may have left something in the store that
	// only its token can take back, an entry in the queue or a lock whose
	// reply was lost: leave.lua takes both back when it gives up.
	mustLeave := false
	defer func() {
		if mustLeave {
			// After Close, within ctx only; what it cannot give back is
			// left to its TTL, and this Acquire fails anyway.
			_ = l.leave(ctx, r)
		}
		if leaveQueue != nil {
			leaveQueue()
		}
		if w != nil {
			l.notify.unsubscribe(w)
		}
		if waiting {
			cfg.Observer.Waiting(false)
		}
	}()
	if cfg.Wait == instrument.WaitDeadline && l.notify.subscribed(keys.channel) {
		// The key was contended lately and its channel is still
		// subscribed: wait on it from the first attempt, which then queues
		// this waiter for a handoff already.
		if id, ok := l.store.wakeID(r); ok {
			if w = l.notify.join(keys.channel, id); w != nil {
				r.queue = true
			}
		}
	}
	var sent time.Time // when the last attempt was sent
	var seen uint64    // a fence floor from the last attempt that failed (attempt.seen)
	moving := 0        // attempts in a row answered as resharding (see resharding)
	_, isQuorum := l.store.(*quorum)
	for n := 1; ; n++ {
		// Close may have come while this waiter waited for its turn or its
		// subscription; nothing is acquired through a closed Locker.
		if l.notify.isClosed() {
			return nil, fmt.Errorf("redislock: acquire %q: %w", key, ErrClosed)
		}
		sent = time.Now()
		a, err := l.store.attempt(ctx, r)
		if err != nil {
			// The attempt may have run although no reply said so: queued
			// this waiter, or taken the lock under r.tok, which nobody
			// would then release before its TTL ran out (see unanswered).
			mustLeave = mustLeave || r.queue || a.unanswered || unanswered(err)
			if cerr := storefail.Ended(ctx); cerr != nil {
				return nil, fmt.Errorf("redislock: acquire %q: %w: %w", key, instrument.ErrNotAcquired, cerr)
			}
			// The lock's slot is being moved to another primary: Redis
			// runs no script of this lock until its keys are on one
			// node. A caller that waits keeps waiting, within its
			// deadline (Retry: its attempts), as it would for a holder,
			// and one that does not wait (FailFast, Retry out of
			// attempts) is refused as by a holder: ErrNotAcquired. The
			// store answered and is serving; the lock may well be held
			// (its holder's renewals follow the move). The answer goes
			// in as text, not in the error chain, where TRYAGAIN reads
			// as a server not serving (storefail) and Govern's FailOpen
			// would take a process-local lock beside the store's holder.
			if !isQuorum && l.movesSlot(err) {
				if cfg.Wait == instrument.WaitFailFast {
					return nil, fmt.Errorf("redislock: acquire %q: %w: the lock's hash slot is moving (%v)", key, instrument.ErrNotAcquired, err)
				}
				var sleep time.Duration
				if cfg.Wait == instrument.WaitRetry {
					if n >= cfg.MaxAttempts {
						return nil, fmt.Errorf("redislock: acquire %q after %d attempts: %w: the lock's hash slot is moving (%v)", key, n, instrument.ErrNotAcquired, err)
					}
					sleep = cfg.Backoff.Delay(n)
				} else {
					moving++
					sleep = min(cfg.PollInterval, reshardPause(moving))
				}
				startWaiting()
				if err := l.pause(ctx, w, sleep); err != nil {
					return nil, fmt.Errorf("redislock: acquire %q: %w: %w", key, instrument.ErrNotAcquired, err)
				}
				continue
			}
			return nil, fmt.Errorf("redislock: acquire %q: %w", key, err)
		}
		moving = 0
		cfg.Observer.Attempt(a.acquired)
		if a.acquired && a.unconfirmed {
			// Taken by an attempt sent without a WAIT (it followed a
			// refused one): on the primary only. An attempt with a WAIT
			// confirms it at once (acquire.lua finds the lock this
			// token's and re-arms it, a write the WAIT covers); until
			// then it is this Acquire's to give back.
			mustLeave, r.noWait = true, false
			continue
		}
		if a.acquired {
			mustLeave = false // acquiring took this waiter out of the queue
			lease := newLease(l.store, key, r, a.fence, sent, &cfg, leaveQueue)
			leaveQueue = nil
			return lease, nil
		}
		mustLeave, seen = a.queued || a.unanswered, a.seen
		// A refused attempt wrote the fence counter (and a queue entry),
		// whose replication no grant depends on: the next attempt asks
		// for no WAIT, which would cost a replica round trip, or the
		// whole timeout while replicas are down, for nothing. One that
		// acquires is confirmed (above). See "Replica acknowledgements".
		r.noWait = true

		var sleep time.Duration
		switch cfg.Wait {
		case instrument.WaitFailFast:
			return nil, fmt.Errorf("redislock: acquire %q: %w", key, instrument.ErrNotAcquired)
		case instrument.WaitRetry:
			if n >= cfg.MaxAttempts {
				return nil, fmt.Errorf("redislock: acquire %q after %d attempts: %w", key, n, instrument.ErrNotAcquired)
			}
			sleep = cfg.Backoff.Delay(n)
		default: // WaitDeadline
			if w != nil {
				// queued for a handoff: the release wakes this waiter
			} else if id, ok := l.store.wakeID(r); ok {
				if w, err = l.notify.subscribe(ctx, keys.channel, id); err != nil {
					return nil, fmt.Errorf("redislock: acquire %q: subscribe: %w", key, err)
				}
				r.queue = true // the next attempts queue for a handoff
				startWaiting()
				// The holder may have released before the subscription was
				// confirmed; try again as soon as it is.
				if err := waitReady(ctx, w, cfg.PollInterval); err != nil {
					return nil, fmt.Errorf("redislock: acquire %q: %w: %w", key, instrument.ErrNotAcquired, err)
				}
				continue
			}
			sleep = l.store.retryDelay(cfg.PollInterval, a)
		}
		startWaiting()
		if err := l.pause(ctx, w, sleep); err != nil {
			return nil, fmt.Errorf("redislock: acquire %q: %w: %w", key, instrument.ErrNotAcquired, err)
		}
		f := w.handedOver()
		if f > seen && l.confirmHandoffs {
			// Handed the lock: the next attempt is its confirmation.
			r.noWait = false
		}
		if f > seen && time.Since(sent) < r.ttl/3 && !l.confirmHandoffs {
			// A release handed this waiter the lock. It did so after the
			// last attempt ran (that attempt would have found the lock
			// this token's, and a notification older than it carries a
			// fence not above what it saw), so the lock lives a TTL from
			// after sent: the lease counts from sent. A notification that
			// came too long after sent to leave the lease much of its TTL
			// is confirmed by the next attempt instead, which re-arms the
			// TTL (acquire.lua finds the lock this token's).
			cfg.Observer.Attempt(true)
			mustLeave = false // the handoff took this waiter out of the queue
			lease := newLease(l.store, key, r, f, sent, &cfg, leaveQueue)
			leaveQueue = nil
			return lease, nil
		}
	}
}

// leave takes back what an Acquire that gave up may have left under its
// token (store.leave): its entry in the queue, and the lock, if a release
// handed it over meanwhile or an attempt whose reply was lost took it
// (unanswered). leave.lua is a round trip of its own, bounded by a second
// (store.go), not by ctx, which has ended: it runs on a goroutine that
// Close waits for, on ctx detached from its cancellation, so that Acquire
// returns by its deadline. On a closed Locker nothing runs in the
// background any more (Close may be waiting already): see leaveClosed,
// whose error leave returns. Otherwise it returns nil.
//
// A try that fails is tried again, with back-off, for as long as it can
// still matter: the entry can be handed the lock until its deadline (at
// most the waiter timeout after its last attempt, which was before now),
// and a lock handed to it lives its TTL from then. Without the retry, a
// waiter that gave up while Redis was out of its reach, and that a release
// handed the lock to before the entry's deadline, held the lock for a
// whole TTL with nobody using it. Close stops the retries.
//
// The leaves in the background are bounded, so that an outage in which
// many callers give up (every attempt timing out against an unreachable
// server) neither piles up goroutines nor takes the client's pool from
// the application: at most maxLeaving tries run at once, and at most
// maxPendingLeaves leaves wait for their turn; one past that is not tried,
// and what it would have taken back ends by itself (the entry at its
// deadline, a lock at its TTL).
func (l *Locker) leave(ctx context.Context, r *request) error {
	if l.pendingLeaves.Add(1) > maxPendingLeaves {
		l.pendingLeaves.Add(-1)
		return nil
	}
	if l.notify.goTracked(func() {
		defer l.pendingLeaves.Add(-1)
		l.leaveUntil(context.WithoutCancel(ctx), r, time.Now().Add(l.waiterTTL+r.ttl))
	}) {
		return nil
	}
	l.pendingLeaves.Add(-1)
	return l.leaveClosed(ctx, r)
}

// leaveClosed is the leave of a closed Locker, which can neither run it in
// the background nor try it again: one try, in the caller, bounded by the
// caller's ctx (and a second, as every try), and none at all when ctx has
// ended. Detaching it from ctx, as the background does, made a caller that
// had given up wait for it (a Release after Close under an ended request
// context: up to a second, longer than the caller asked for). What it does
// not give back is left to its TTL (an entry to its deadline), and its
// error says so, wrapping ErrClosed.
func (l *Locker) leaveClosed(ctx context.Context, r *request) error {
	if storefail.Ended(ctx) != nil {
		return fmt.Errorf("not given back, %w: the lock is left to its TTL", ErrClosed)
	}
	if err := l.store.leave(ctx, r); err != nil {
		return fmt.Errorf("the give-back failed (%w), and %w: the lock is left to its TTL", err, ErrClosed)
	}
	return nil
}

// maxLeaving bounds the leave.lua tries of one Locker in flight at once;
// maxPendingLeaves the leaves waiting for one of them (Locker.leave).
const (
	maxLeaving       = 4
	maxPendingLeaves = 4096
)

// leaveUntil runs leave.lua until it succeeds, fails for good (see
// retryLeave), the Locker closes, or the next try would start after until.
func (l *Locker) leaveUntil(ctx context.Context, r *request, until time.Time) {
	delay := minReconnectDelay
	for {
		select {
		case l.leaving <- struct{}{}:
		default:
			// Wait for a try to end; after Close only a free slot is
			// taken, so that Close does not wait for a queue of tries.
			select {
			case l.leaving <- struct{}{}:
			case <-l.notify.done:
				return
			}
		}
		err := l.store.leave(ctx, r)
		<-l.leaving
		// A resharding answer (a script aborted mid-way: only what the
		// next try does too had run) is tried again as well: the slot's
		// migration ends, and the next try runs on the node that has it.
		if err == nil || !retryLeave(err) && !l.movesSlot(err) || time.Now().Add(delay).After(until) {
			return
		}
		if !backOff(&delay, l.notify.done) {
			return
		}
	}
}

// retryLeave reports whether a leave try that failed with err is worth
// trying again: not when Redis refused it with an error reply other than a
// transient one (trying again would not change it), nor when the client is
// closed (it sends nothing more). In quorum mode each node's error is
// judged so, and a node that failed for good is done with; while others
// are left to try, the leave's error says so (nodesLeft).
func retryLeave(err error) bool {
	if errors.As(err, new(nodesLeft)) {
		return true
	}
	var reply redis.Error
	if errors.As(err, &reply) && !transientReply(err) {
		return false
	}
	return !errors.Is(err, redis.ErrClosed)
}

// transientReply reports whether err is an error reply that says Redis
// could not run the command now, not that the command is wrong: the
// replies storefail.Unavailable counts as a store not serving (LOADING,
// CLUSTERDOWN, MASTERDOWN, TRYAGAIN), and those that are no reason to
// decide without the store but are to try again: a script of another
// client running past busy-reply-threshold (BUSY), a replica after a
// failover (READONLY), too few replicas (NOREPLICAS), the client limit.
func transientReply(err error) bool {
	if storefail.Unavailable(err) {
		return true
	}
	for _, prefix := range []string{"BUSY ", "READONLY ", "NOREPLICAS ", "max number of clients"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// pause sleeps for d, or until a release notification, or until ctx ends.
// It returns ErrClosed when the Locker was closed meanwhile.
func (l *Locker) pause(ctx context.Context, w *waiter, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	var wake <-chan struct{}
	if w != nil {
		wake = w.wake
	}
	select {
	case <-t.C:
	case <-wake:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if l.notify.isClosed() {
		return ErrClosed
	}
	return nil
}

// waitReady waits for w's subscription to be confirmed, at most limit. It
// also returns when w is woken: by a release heard meanwhile, or by the
// connection breaking, after which the notifier wakes every waiter to try
// again (a Fair waiter is queued already, and may have been handed the
// lock while its SUBSCRIBE kept failing).
func waitReady(ctx context.Context, w *waiter, limit time.Duration) error {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-w.ready:
	case <-w.wake:
	case <-t.C: // not confirmed in time: fall back to polling
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}

// meta builds the JSON object (without its closing brace, which the script
// adds after the fence) stored in the lock value. acquired_at_ms is this
// process's wall clock when it sent the request.
func (l *Locker) meta(cfg *instrument.AcquireConfig) string {
	var b strings.Builder
	call := lockvalue.Call{TraceID: cfg.TraceID, Labels: cfg.Meta, TTL: cfg.TTL}
	b.Grow(l.value.Size(call, 1))
	l.value.Begin(&b, call)
	lockvalue.AppendTime(&b, lockvalue.AcquiredAt, time.Now())
	return b.String()
}

// newToken returns 128 random bits, base64url, and the separating space the
// scripts compare as a prefix.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	var t [23]byte         // 22 base64 characters and the space
	base64.RawURLEncoding.Encode(t[:22], b[:])
	t[22] = ' '
	return string(t[:])
}
