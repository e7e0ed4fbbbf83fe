package redislock

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/internal/leasecore"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
)

// store is how a Locker takes, keeps and gives up a lock in one mode: on one
// node (node), on one node with a FIFO queue of waiters (fairNode), or over
// a majority of independent nodes (quorum). New and NewQuorum choose one;
// Acquire and the lease only call it.
type store interface {
	// attempt runs the acquire script once.
	attempt(ctx context.Context, r *request) (attempt, error)
	// leave takes back what an Acquire that gives up may have left in the
	// store under its token: its entry in the store's queue, when attempt
	// said it had joined one, and the lock, if a release handed it to the
	// waiter meanwhile or an attempt whose reply was lost took it (leave
	// hands it on, or deletes it). One try; an error says it may not have
	// run (Locker.leave tries again).
	leave(ctx context.Context, r *request) error
	// wakeID says whether a deadline waiter can wait for a release
	// notification (ok), and which id the notification must name to wake
	// it ("": any release). A waiter that subscribed queues for a handoff
	// from its next attempt on.
	wakeID(r *request) (id string, ok bool)
	// retryDelay is how long a deadline waiter waits before its next
	// attempt after a, at most poll (a notification may wake it sooner).
	retryDelay(poll time.Duration, a attempt) time.Duration
	// takesTurns says whether a Locker's deadline waiters on one key take
	// turns in-process (localQueue), only the one whose turn it is
	// contending in Redis, and the turn held with the lease.
	takesTurns() bool
	// refresh runs the owner-checked extension once; ok false with a nil
	// error means ownership is proven gone.
	refresh(ctx context.Context, keys keySet, tok string, ttl time.Duration) (ok bool, err error)
	// release runs the owner-checked release once; ok false with a nil
	// error means the lock was not this token's. ok is also true when a
	// retry of this call (go-redis resends a command whose reply was lost)
	// finds the tombstone its first try left: that try released it.
	// The lock goes to the first live waiter queued for a handoff, if any.
	release(ctx context.Context, r *request) (ok bool, err error)
	// drift is the margin between a lease's last confirmed expiry and the
	// end of its context.
	drift(ttl time.Duration) time.Duration
}

// request is one Acquire call, as the stores see it.
type request struct {
	keys      keySet
	tok       string
	ttl       time.Duration
	meta      string        // the lock value's JSON, without its closing brace
	fenceTTL  time.Duration // TTL + fence retention
	once      bool          // FailFast: one attempt, so join no queue
	queue     bool          // a deadline waiter that subscribed: attempts queue it for a handoff
	noWait    bool          // the next attempt sends no WAIT (WithReplicaAcks): the last was refused (Locker.Acquire)
	releasing bool          // the lease's Release is giving the lock back (quorum.leave stops once a majority of nodes is free of it)
	entry     string        // its queue entry, made on the first queued attempt
	lid       string        // the Locker's channel suffix: a handoff is published there
	// nodes: quorum mode, the nodes that may hold the lock under tok
	// although no reply said so (a reply lost, a give-back that failed);
	// quorum.leave gives it back there.
	nodes []bool
	st    store            // the store that granted the lease (set with it)
	core  *leasecore.Lease // that lease's lifecycle (set with it): its local deadline bounds a release retried while the slot moves
	owner *Locker          // gives the lock back when a release's outcome is unknown (request.Release)
	// kept: quorum mode, the nodes that may still hold the grant but that
	// no give-back can reach (a closed client, a release refused for good):
	// quorum.blocks counts them with the marked ones.
	kept int

	// What node's calls send, kept here so that a call boxes no argument:
	// go-redis writes *string and *int64 arguments in place (see evalsha).
	ttlMs, fenceTTLMs, retentionMs, waiterTTLMs, tombTTLMs int64
	tomb                                                   string // the tombstone key, made at release
	args                                                   [14]any
	ack                                                    ackReply // the WAIT after the last acquire attempt (WithReplicaAcks)
	// New fields go into padding where they can (noWait and releasing sit
	// beside once and queue): at 568 bytes plus the malloc header of a
	// pointerful object over 512, request is at the top of its 576-byte
	// size class, and 8 bytes more cost every Acquire 64
	// (TestRequest_FitsItsSizeClass). core took 8: releasing moved here
	// from beside kept to give them back.
}

// queueEntry is the request's entry in the waiter queue: what a release
// needs to hand it the lock (see handoff_lib.lua).
func (r *request) queueEntry() string {
	if r.entry == "" {
		r.entry = r.tok + strconv.FormatInt(r.ttl.Milliseconds(), 10) + " " + r.lid + " " + r.meta
	}
	return r.entry
}

// waiterID is the id a handoff notification names the waiter by: the
// first 24 hex digits of the SHA-1 of its token, as handoff_lib.lua
// computes it (the token itself never goes on a channel).
func waiterID(tok string) string {
	sum := sha1.Sum([]byte(tok))
	return hex.EncodeToString(sum[:12])
}

// scriptArgs are the keys and arguments of acquire.lua; the fair script
// takes more after them.
func (r *request) scriptArgs() ([]string, []any) {
	return []string{r.keys.lock, r.keys.fence},
		[]any{r.tok, r.ttl.Milliseconds(), r.meta, r.fenceTTL.Milliseconds()}
}

// attempt is the outcome of one acquire attempt.
type attempt struct {
	acquired  bool
	fence     uint64        // acquired: the lease's fence
	holderTTL time.Duration // not acquired: the holder's remaining TTL (<= 0: unknown)
	pos       int64         // fair mode: the caller's place in the queue (0: next in line)
	queued    bool          // the caller joined the store's queue: leave it on giving up
	// unanswered: quorum mode, a node may hold the lock under this token
	// although no reply said so (request.nodes): its reply to this or an
	// earlier attempt was lost, or the give-back of its grant failed.
	unanswered bool
	seen       uint64 // not acquired: >= every fence issued before this attempt, < every later one
	// unconfirmed: acquired by an attempt sent without a WAIT
	// (request.noWait): on the primary only, granted once an attempt
	// followed by a WAIT confirms it.
	unconfirmed bool
}

// node is a lock on one Redis deployment (a single node, Sentinel or
// Cluster): whoever asks first when the lock is free gets it.
type node struct {
	c         redis.UniversalClient
	send      *combiner     // acquire and release scripts: c's commands, pipelined when concurrent
	waiterTTL time.Duration // how long a queued waiter counts as alive without retrying
	acks      replicaAcks   // WithReplicaAcks: acquires and renewals wait for replicas
}

func (s node) attempt(ctx context.Context, r *request) (attempt, error) {
	// The command line of acquire.lua, as scriptArgs and the waiting
	// arguments say, from pointers into r (r's calls never overlap on
	// one node; quorum mode, which fans one r out, uses scriptArgs).
	r.ttlMs, r.fenceTTLMs = r.ttl.Milliseconds(), r.fenceTTL.Milliseconds()
	a := &r.args
	n := 9
	a[2], a[3], a[4] = 2, &r.keys.lock, &r.keys.fence
	a[5], a[6], a[7], a[8] = &r.tok, &r.ttlMs, &r.meta, &r.fenceTTLMs
	if r.queue {
		r.queueEntry()
		r.waiterTTLMs = s.waiterTTL.Milliseconds()
		a[2], a[5], a[6] = 4, &r.keys.queue, &r.keys.waiters
		a[7], a[8], a[9], a[10] = &r.tok, &r.ttlMs, &r.meta, &r.fenceTTLMs
		a[11], a[12] = &r.entry, &r.waiterTTLMs
		n = 13
	}
	v, err := evalsha(ctx, s.send, nil, s.ackOf(r), &acquireCall, a[:n], redis.NewCmd).Result()
	var att attempt
	var res []int64
	if err == nil {
		att, res, err = decodeAcquire(v)
	}
	if err == nil && att.acquired {
		err = s.checkAcquired(r, &att)
	}
	if err == nil && !att.acquired {
		att.queued = r.queue
		if len(res) > 2 {
			att.seen = uint64(max(res[2], 0))
		}
	}
	return att, err
}

// evalsha runs script with the command line args, whose first two slots
// it fills ("evalsha" and the digest; args[2] holds the number of keys),
// falling back to EVAL when the server lacks the script, as
// redis.Script.Run does but without copying and boxing every argument. The
// reply is read by the typed command newCmd makes (integers straight into
// an int64 or []int64, not through interface values). window, if not nil,
// is the argument a batch raises to its resend window (combiner.process).
func evalsha[C redis.Cmder](ctx context.Context, c *combiner, window *int64, ack *ackReply, s *luaCall, args []any, newCmd func(context.Context, ...any) C) C {
	args[0], args[1] = "evalsha", s.sha
	cmd := newCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	_ = c.process(ctx, cmd, window, ack)
	if err := cmd.Err(); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		args[0], args[1] = "eval", s.src
		cmd = newCmd(ctx, args...)
		cmd.SetFirstKeyPos(3)
		_ = c.process(ctx, cmd, window, ack)
	}
	return cmd
}

// runAcquire runs an acquire script on one node and decodes its reply (see
// decodeAcquire); the array of one that did not acquire is returned for
// the rest.
func runAcquire(ctx context.Context, c redis.UniversalClient, script *redis.Script, kk []string, args []any) (attempt, []int64, error) {
	v, err := script.Run(ctx, c, kk, args...).Result()
	if err != nil {
		return attempt{}, nil, err
	}
	return decodeAcquire(v)
}

// decodeAcquire decodes an acquire script's reply: the fence, a bare
// integer of at least 1, when acquired, or {0, pttl, ...} when not, whose
// integers it returns for the caller to read the rest from (nil when
// acquired). The acquired reply is not an array because redis-server
// builds, converts and collects a Lua table for an array reply, about a
// twentieth of its work for an uncontended pair.
func decodeAcquire(v any) (attempt, []int64, error) {
	switch x := v.(type) {
	case int64:
		if x < 1 {
			return attempt{}, nil, fmt.Errorf("unexpected script reply %d: a fence is at least 1", x)
		}
		return attempt{acquired: true, fence: uint64(x)}, nil, nil
	case []any:
		res := make([]int64, len(x))
		for i, e := range x {
			n, ok := e.(int64)
			if !ok {
				return attempt{}, nil, fmt.Errorf("unexpected script reply %v: element %d is not an integer", x, i)
			}
			res[i] = n
		}
		if len(res) < 2 || res[0] != 0 {
			return attempt{}, nil, fmt.Errorf("unexpected script reply %v", res)
		}
		return attempt{holderTTL: time.Duration(res[1]) * time.Millisecond}, res, nil
	}
	return attempt{}, nil, fmt.Errorf("unexpected script reply %v (%T)", v, v)
}

func (s node) leave(ctx context.Context, r *request) error { return leave(ctx, s.c, r, false) }

// leave runs leave.lua once, within a second and within ctx: out of the
// queue, and the lock handed on if a release handed it to this waiter
// meanwhile. A leave in the background runs on a context detached from the
// caller's (Locker.leaveUntil); a closed Locker's, in the caller, on the
// caller's (Locker.leaveClosed).
func leave(ctx context.Context, c redis.UniversalClient, r *request, fair bool) error {
	ctx, cancel := context.WithTimeout(ctx, leaveTimeout)
	defer cancel()
	f := "0"
	if fair {
		f = "1"
	}
	return leaveScript.Run(ctx, c, []string{r.keys.lock, r.keys.queue, r.keys.waiters, r.keys.fence},
		r.tok, r.keys.channel, r.queueEntry(), (r.fenceTTL - r.ttl).Milliseconds(), f).Err()
}

// leaveTimeout bounds one try of leave.lua.
const leaveTimeout = time.Second

// wakeID names the waiter by its id: a release hands the lock to the head
// of the queue and wakes only that waiter.
func (node) wakeID(r *request) (string, bool) { return waiterID(r.tok), true }

// takesTurns says yes: one Redis queue entry and one retry cycle per
// Locker and key instead of one per goroutine; this mode promises no order
// between callers of different Lockers anyway.
func (node) takesTurns() bool { return true }

// retryDelay keeps the waiter's place in the queue (retry at a third of
// the waiter timeout) and retries at the holder's expiry, which hands
// nothing over.
func (s node) retryDelay(poll time.Duration, a attempt) time.Duration {
	return untilExpiry(min(poll, s.waiterTTL/3), a.holderTTL)
}

// untilExpiry shortens a wait of d to the holder's expiry: an expiring
// lock publishes nothing.
func untilExpiry(d, holderTTL time.Duration) time.Duration {
	if holderTTL > 0 && holderTTL < d {
		return holderTTL + time.Millisecond
	}
	return d
}

func (s node) refresh(ctx context.Context, keys keySet, tok string, ttl time.Duration) (bool, error) {
	if !s.acks.on() {
		n, err := refreshScript.Run(ctx, s.c, []string{keys.lock}, tok, ttl.Milliseconds()).Int64()
		return n == 1, err
	}
	// With a WAIT after it, through the combiner (one pipeline, one
	// connection). A renewal the replicas did not acknowledge extended the
	// lock on the primary only, which a failover to a replica forgets: it
	// fails, and leasecore counts the lease from the last renewal that
	// succeeded (a failed renewal confirms nothing and is tried again).
	var ack ackReply
	args := []any{nil, nil, 1, keys.lock, tok, ttl.Milliseconds()}
	n, err := evalsha(ctx, s.send, nil, &ack, &refreshCall, args, redis.NewIntCmd).Result()
	if err == nil && n == 1 {
		err = s.acks.check(ack)
	}
	return n == 1, err
}

// ackOf is where the WAIT after r's acquire script answers, or nil when no
// WAIT is asked for: without WithReplicaAcks, and on an attempt that
// follows a refused one (request.noWait).
func (s node) ackOf(r *request) *ackReply {
	if !s.acks.on() || r.noWait {
		return nil
	}
	r.ack = ackReply{}
	return &r.ack
}

// checkAcquired judges an attempt that acquired by the WAIT after it
// (WithReplicaAcks): nil when enough replicas acknowledged, else why not.
// One sent without a WAIT is marked unconfirmed instead, for the next
// attempt, with a WAIT, to confirm (Locker.Acquire).
func (s node) checkAcquired(r *request, att *attempt) error {
	if !s.acks.on() {
		return nil
	}
	if r.noWait {
		att.unconfirmed = true
		return nil
	}
	return s.acks.checkAcquire(r.ack)
}

func (s node) release(ctx context.Context, r *request) (bool, error) {
	// release.lua's command line from pointers into r, as runRelease
	// sends it (a lease's releases never overlap: leasecore runs one).
	r.tomb = r.keys.tombstone(r.tok)
	r.tombTTLMs, r.retentionMs = tombstoneTTL(ctx, s.send.tombCap), (r.fenceTTL - r.ttl).Milliseconds()
	a := &r.args
	a[2], a[3], a[4], a[5], a[6], a[7] = 5, &r.keys.lock, &r.tomb, &r.keys.queue, &r.keys.fence, &r.keys.waiters
	a[8], a[9], a[10], a[11] = &r.tok, &r.keys.channel, &r.tombTTLMs, &r.retentionMs
	// No WAIT: a release lost in a failover leaves the lock to its TTL
	// (liveness, not safety); a handoff's new holder confirms its lock
	// with an acquire of its own (Locker.Acquire).
	n, err := evalsha(ctx, s.send, &r.tombTTLMs, nil, &releaseCall, a[:12], redis.NewIntCmd).Result()
	return n >= 1, err
}

// runRelease runs release.lua; handoff says whether waiters may be queued
// (not in quorum mode, whose waiters poll).
func runRelease(ctx context.Context, c redis.UniversalClient, r *request, handoff bool) (bool, error) {
	keys := []string{r.keys.lock, r.keys.tombstone(r.tok), r.keys.queue, r.keys.fence, r.keys.waiters}
	if !handoff {
		keys = keys[:2]
	}
	n, err := releaseScript.Run(ctx, c, keys, r.tok, r.keys.channel, tombstoneTTL(ctx, maxTombstoneTTL), (r.fenceTTL - r.ttl).Milliseconds()).Int64()
	return n >= 1, err
}

func (node) drift(ttl time.Duration) time.Duration { return leasecore.Drift(ttl) }

// maxTombstoneTTL bounds a tombstone's life whatever the context. go-redis's
// retries are counted (MaxRetries) and each waits at most the client's
// timeouts, so with its defaults a retry of a release runs within seconds
// of the first try, unless new connections fail to dial for tens of
// seconds in between; a minute covers that. A retry later still finds no
// tombstone and reports the lock not held (ErrNotHeld): a false report of
// a loss, never a second release, since release.lua checks the token.
// Without the bound, a release under an hour-long context left every
// token's tombstone for an hour: a million keys at 300 releases a second.
const maxTombstoneTTL = time.Minute

// tombstoneTTL is how long a release's tombstone lives, in milliseconds:
// as long as the call can be retried (storefail.ResendWindow), and never
// more than limit (maxTombstoneTTL, but for a test's own Locker: see
// combiner.tombCap). ctx is the one go-redis sends under: the caller's, or
// a batch's (combiner.send raises a batched release's TTL).
func tombstoneTTL(ctx context.Context, limit time.Duration) int64 {
	return storefail.ResendWindow(ctx, limit).Milliseconds()
}

// unanswered reports whether a command that failed with err may have run
// on the server all the same, so that what it may have taken under its
// token must be given back: every error but a closed client's.
//
// A lost reply (a read timeout, the caller's context ending while the
// reply was on its way, a connection broken after the write) leaves the
// outcome unknown. An error that says the command was not sent (a dial
// that failed, a pool timeout) or was refused (an error reply) speaks only
// for the try that returned it: go-redis resends a command whose reply was
// lost while its context lives, and returns the last try's error alone, so
// a refused dial or an OOM reply to the resend hides a first try that ran
// and took the lock. Nothing in the error says whether there was an
// earlier try. A closed client sends nothing more, a leave included. A
// context that ended before the command was written counts too: nothing
// says which side of the write it ended on.
func unanswered(err error) bool {
	return err != nil && !errors.Is(err, redis.ErrClosed)
}
