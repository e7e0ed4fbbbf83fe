package redislock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
)

// Quorum defaults, after the Redlock description.
const (
	DefaultDriftFactor = 0.01
	minNodeTimeout     = 50 * time.Millisecond
	maxNodeTimeout     = 250 * time.Millisecond
)

// quorum is a lock over N independent Redis primaries (see NewQuorum): held
// while a majority of them holds it.
type quorum struct {
	nodes       []node
	majority    int
	driftFactor float64
	nodeTimeout time.Duration // 0: derived from the TTL
}

// NewQuorum returns a Locker over N independent Redis primaries (no
// replication between them): a lock is held when a majority of them granted
// it within the lease validity, Redlock-style.
//
// This is an efficiency lock, not a correctness lock. Its safety rests on
// bounded clock drift and process pauses (see the Redlock debate); a holder
// paused past its validity can still write. Pair it with a fence checked by
// the resource, from a store that gives one.
//
// Fence() in quorum mode is the largest fence issued by any node that
// answered the winning attempt. Every attempt moves the counter up on every
// node it reaches, so a later holder's fence is larger as long as the node
// that issued an earlier holder's fence still answers. After that node is
// lost, the order rests on the clocks of the nodes (each node's fence is at
// least its own clock in microseconds): it holds only if they agree to
// within the time between the two acquisitions. Treat it as a diagnostic,
// not a fencing token, in this mode.
//
// Give the node clients a small DialerRetries (go-redis re-dials a refused
// connection 5 times, 100 ms apart, by default): a dead node should cost a
// refused connection, not the node timeout, on every attempt.
//
// Waiters in quorum mode poll with jitter (there is no single node whose
// release notification speaks for the majority). Release and refresh run on
// every node; refresh succeeds when a majority confirms, and the lease is
// lost when a majority can no longer confirm.
func NewQuorum(nodes []redis.UniversalClient, opts ...QuorumOption) (*Locker, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: redislock.NewQuorum: no nodes", instrument.ErrInvalidOption)
	}
	for i, c := range nodes {
		if c == nil {
			return nil, fmt.Errorf("%w: redislock.NewQuorum: nil client at index %d", instrument.ErrInvalidOption, i)
		}
	}
	o, err := applyQuorumOptions(opts)
	if err != nil {
		return nil, err
	}
	q := &quorum{
		nodes:       make([]node, len(nodes)),
		majority:    len(nodes)/2 + 1,
		driftFactor: o.driftFactor,
		nodeTimeout: o.nodeTimeout,
	}
	for i, c := range nodes {
		q.nodes[i] = node{c: c, send: newCombiner(c, replicaAcks{})}
	}
	// The notifier is never used for waiting (quorum waiters poll); it is
	// there for Close.
	return newLocker(nodes[0], q, o)
}

func (q *quorum) timeoutFor(ttl time.Duration) time.Duration {
	if q.nodeTimeout > 0 {
		return q.nodeTimeout
	}
	return min(max(ttl/20, minNodeTimeout), maxNodeTimeout)
}

func (q *quorum) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*q.driftFactor) + 2*time.Millisecond
}

// reply is one node's answer: yes or no, and the acquire script's reply.
type reply struct {
	ok  bool
	v   []int64 // not ok: an acquire script's reply (decodeAcquire)
	err error
	// fence is an acquire's fence when ok.
	fence int64
}

// fanOut runs call on every node in parallel, each bounded by the node
// timeout, and returns when all have answered.
func (q *quorum) fanOut(ctx context.Context, ttl time.Duration, call func(ctx context.Context, n node) reply) []reply {
	out := make([]reply, len(q.nodes))
	var wg sync.WaitGroup
	for i, n := range q.nodes {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, q.timeoutFor(ttl))
			defer cancel()
			out[i] = call(nctx, n)
		})
	}
	wg.Wait()
	return out
}

// vote runs call on every node and counts the nodes that said yes and the
// nodes that said no; errs holds each node's error, nil for a node that
// answered (joinNodes joins them).
func (q *quorum) vote(ctx context.Context, ttl time.Duration, call func(ctx context.Context, n node) (bool, error)) (yes, no int, errs []error) {
	replies := q.fanOut(ctx, ttl, func(ctx context.Context, n node) reply {
		ok, err := call(ctx, n)
		return reply{ok: ok, err: err}
	})
	errs = make([]error, len(replies))
	for i, rep := range replies {
		switch {
		case rep.err != nil:
			errs[i] = rep.err
		case rep.ok:
			yes++
		default:
			no++
		}
	}
	return yes, no, errs
}

// joinNodes joins the nodes' errors, each named by its node's index.
func joinNodes(errs []error) error {
	var out []error
	for i, err := range errs {
		if err != nil {
			out = append(out, fmt.Errorf("node %d: %w", i, err))
		}
	}
	return errors.Join(out...)
}

// attempt makes one quorum attempt. It reports acquired with the fence, or
// not acquired with the shortest remaining TTL among the holders' nodes.
// When fewer than a majority of nodes answer at all, nothing is decided and
// err says why (see tooFew).
func (q *quorum) attempt(ctx context.Context, r *request) (attempt, error) {
	start := time.Now()
	kk, args := r.scriptArgs()
	replies := q.fanOut(ctx, r.ttl, func(ctx context.Context, n node) reply {
		a, v, err := runAcquire(ctx, n.c, acquireScript, kk, args)
		return reply{ok: a.acquired, v: v, err: err, fence: int64(a.fence)}
	})
	var granted, answered int
	var fence, pttl int64 = 0, -1
	var errs []nodeError
	if r.nodes == nil {
		r.nodes = make([]bool, len(q.nodes))
	}
	for i, rep := range replies {
		if rep.err != nil {
			e := nodeError{fmt.Errorf("node %d: %w", i, rep.err), storefail.Unavailable(rep.err)}
			if errors.Is(rep.err, context.DeadlineExceeded) {
				// The node's own timeout, unless the caller's context
				// ended (tooFew tells them apart).
				e = nodeError{nodeTimeout{i, q.timeoutFor(r.ttl), rep.err}, true}
			}
			errs = append(errs, e)
			// The node may have granted the lock, its reply lost (or
			// hidden behind a resend's error: see unanswered).
			r.nodes[i] = r.nodes[i] || unanswered(rep.err)
			continue
		}
		// An answer is this token's grant, given back below unless the
		// lock is acquired, or says another token holds the lock there.
		r.nodes[i] = false
		answered++
		if rep.ok {
			granted++
			fence = max(fence, rep.fence)
		} else {
			if pttl < 0 || (rep.v[1] >= 0 && rep.v[1] < pttl) {
				pttl = rep.v[1]
			}
			if len(rep.v) > 2 {
				fence = max(fence, rep.v[2])
			}
		}
	}
	// Validity counts from this attempt's start. A node that answered with
	// a grant from an earlier attempt of this Acquire (same token, its reply
	// lost then) re-armed the key's TTL in acquire.lua, so this holds for
	// it too.
	validity := r.ttl - time.Since(start) - q.drift(r.ttl)
	if granted >= q.majority && validity > 0 {
		return attempt{acquired: true, fence: uint64(fence)}, nil
	}
	// Give back what was granted: a minority, or a majority that came too
	// late. A node the give-back does not reach keeps its grant: it is
	// given back with the nodes whose reply was lost, by the leave of an
	// Acquire that gives up (or by the next attempt, which finds the grant
	// this token's).
	if granted > 0 {
		for i, err := range q.releaseOn(context.WithoutCancel(ctx), r, nil) {
			r.nodes[i] = unanswered(err)
		}
	}
	lost := slices.Contains(r.nodes, true)
	if answered < q.majority {
		return attempt{unanswered: lost}, q.tooFew(ctx, answered, errs)
	}
	// pttl < 0: granted by a majority too late; try again soon.
	return attempt{holderTTL: time.Duration(max(pttl, 0)) * time.Millisecond, unanswered: lost}, nil
}

// nodeError is the error of one node's call in an attempt.
type nodeError struct {
	err        error // "node i: ..."
	outOfReach bool  // a transport failure (storefail.Unavailable) or the node timeout
}

// nodeTimeout is the error of a node whose call the node timeout ended:
// that node's timeout, as a single Redis's read timeout ("i/o timeout") is,
// not a context.DeadlineExceeded in the chain. errors.Is would find one in
// the store failure that tooFew returns, and callers read it as their own
// deadline ending (which tooFew returns as ErrNotAcquired with the
// context's error). The node's error is in the text only.
type nodeTimeout struct {
	node int
	d    time.Duration
	err  error
}

func (e nodeTimeout) Error() string {
	return fmt.Sprintf("node %d: no answer within the node timeout (%v): %v", e.node, e.d, e.err)
}

// Timeout and Temporary say a timeout, as a net.Error does.
func (nodeTimeout) Timeout() bool   { return true }
func (nodeTimeout) Temporary() bool { return true }

// tooFew is the error of an attempt that fewer than a majority of nodes
// answered, from the errors of the others. Whatever the answers said (a
// grant, or another owner's lock), a minority of them says nothing of the
// majority: the lock is neither had nor known to be held by someone else.
//
//   - The caller's context ended (storefail.Ended: the node calls run under
//     it, so their errors may be its deadline): ErrNotAcquired with the
//     context's error, as for any caller that gives up.
//   - So many nodes were out of reach (storefail.Unavailable: a refused or
//     reset connection, a read timeout, LOADING and the like; or no answer
//     within the node timeout, which is not the caller's) that the others
//     cannot make a majority: the store is out of reach, as a single Redis
//     that cannot be reached is. The error is marked so
//     (storefail.Unreachable), and is not ErrNotAcquired: Govern returns it
//     under FailClosed (counted as result error) and falls back to a
//     process-local lock under FailOpen. So too when the nodes that
//     answered said another owner holds the lock.
//   - Otherwise error replies (OOM, NOPERM, a script error) or a closed
//     client kept a majority from answering: the store's answers, never a
//     reason to decide without it, and not ErrNotAcquired either: an error,
//     as the same reply is from a single Redis. The errors of the nodes out
//     of reach are in its text only, so that storefail.Unavailable does not
//     find them in it.
func (q *quorum) tooFew(ctx context.Context, answered int, errs []nodeError) error {
	all := make([]error, len(errs))
	var unreachable int
	for i, e := range errs {
		all[i] = e.err
		if e.outOfReach {
			unreachable++
		}
	}
	if cerr := storefail.Ended(ctx); cerr != nil {
		return fmt.Errorf("%w: %w: %d of %d nodes answered, %d needed: %w",
			instrument.ErrNotAcquired, cerr, answered, len(q.nodes), q.majority, errors.Join(all...))
	}
	if len(q.nodes)-unreachable < q.majority {
		return storefail.Unreachable(fmt.Errorf("%d of %d nodes answered, %d needed: %w",
			answered, len(q.nodes), q.majority, errors.Join(all...)))
	}
	for i, e := range errs {
		if e.outOfReach {
			all[i] = errors.New(e.err.Error())
		}
	}
	return fmt.Errorf("%d of %d nodes answered, %d needed: %w", answered, len(q.nodes), q.majority, errors.Join(all...))
}

// releaseOn runs the owner-checked release, in parallel, on the nodes that
// on says (every node when on is nil), each bounded by the node timeout,
// and returns each node's error (nil for a node left out).
func (q *quorum) releaseOn(ctx context.Context, r *request, on []bool) []error {
	errs := make([]error, len(q.nodes))
	var wg sync.WaitGroup
	for i, n := range q.nodes {
		if on != nil && !on[i] {
			continue
		}
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, q.timeoutFor(r.ttl))
			defer cancel()
			_, errs[i] = runRelease(nctx, n.c, r, false)
		})
	}
	wg.Wait()
	return errs
}

// leave gives back what an Acquire that gave up may hold on nodes that no
// reply said so of (r.nodes: a reply lost, a give-back that failed; quorum
// waiters do not queue): an owner-checked release on each of them, which
// leaves any other token's lock alone. A node that answers is done with,
// and so is one whose release failed for good (an error reply other than a
// transient one, a closed client: see retryLeave), which trying again would
// not change. An error says a node is left to try (Locker.leave tries
// again, on those only) unless every node's error was final.
//
// Each node's error is judged alone. Read as one, the join of them says
// nothing reliable: a final reply found in it would end the retries of
// every node, and a timeout in it hides a LOADING reply beside it (see
// storefail.Unavailable), while a node still holding this token's grant
// keeps it for its TTL with nobody owning it. So while a node is left to
// try, the join comes as nodesLeft, which Locker.leave tries again
// whatever is in it. The errors of the nodes done with stay in it, for
// whoever reads it.
//
// The give-back of a released lease (request.Release) ends sooner: once
// the nodes left are a minority, which cannot keep anyone from the lock.
func (q *quorum) leave(ctx context.Context, r *request) error {
	if !slices.Contains(r.nodes, true) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, leaveTimeout) // detached by the caller, when in the background (Locker.leave)
	defer cancel()
	var errs []error
	left := false
	for i, err := range q.releaseOn(ctx, r, r.nodes) {
		switch {
		case !r.nodes[i]:
		case err == nil:
			r.nodes[i] = false
		case !retryLeave(err):
			r.nodes[i] = false
			r.kept++ // it may still hold the grant, and will until its TTL
			errs = append(errs, fmt.Errorf("node %d, not tried again: %w", i, err))
		default:
			left = true
			errs = append(errs, fmt.Errorf("node %d: %w", i, err))
		}
	}
	if left && r.releasing && !q.blocks(r) {
		// A released lease's give-back: the nodes left may still hold
		// the grant, but too few of them to keep a majority from anyone.
		// As after a Release that some node confirmed, their grants
		// expire at their TTL; trying them again would keep a background
		// try going against a node that is down, for the whole TTL, after
		// every Release on an ended context.
		clear(r.nodes)
		return nil
	}
	if left {
		return nodesLeft{errors.Join(errs...)}
	}
	return errors.Join(errs...)
}

// blocks reports whether the nodes that may still hold r's grants, those
// marked in r.nodes and those no give-back can reach (r.kept), are enough
// to keep every other token from a majority.
func (q *quorum) blocks(r *request) bool {
	n := r.kept
	for _, b := range r.nodes {
		if b {
			n++
		}
	}
	return n > len(q.nodes)-q.majority
}

// nodesLeft is quorum.leave's error while some node is left to try: the
// nodes' errors, joined.
type nodesLeft struct{ error }

func (e nodesLeft) Unwrap() error { return e.error }

// wakeID says no: no single node's release notification speaks for the
// majority, so quorum waiters poll.
func (q *quorum) wakeID(*request) (string, bool) { return "", false }

// takesTurns says yes: one poller per Locker and key instead of one per
// goroutine, each a round trip to every node.
func (q *quorum) takesTurns() bool { return true }

func (q *quorum) retryDelay(poll time.Duration, a attempt) time.Duration {
	return pollDelay(a.holderTTL, poll)
}

// refresh extends the lease on every node; ok when a majority confirms,
// not ok with a nil error when so many nodes deny ownership that a majority
// is impossible.
func (q *quorum) refresh(ctx context.Context, keys keySet, tok string, ttl time.Duration) (ok bool, err error) {
	confirmed, denied, errs := q.vote(ctx, ttl, func(ctx context.Context, n node) (bool, error) {
		return n.refresh(ctx, keys, tok, ttl)
	})
	switch {
	case confirmed >= q.majority:
		return true, nil
	case denied > len(q.nodes)-q.majority:
		return false, nil
	}
	return false, fmt.Errorf("%d of %d nodes confirmed, %d needed: %w", confirmed, len(q.nodes), q.majority, joinNodes(errs))
}

// release runs the owner-checked release on every node. Not ok with a nil
// error when so many nodes deny ownership that no majority holds it for
// this token — even if a minority still had it (a grant that ran late on
// one node outlives the others): the lease had already ended, and what was
// deleted there was only this token's leftover. Otherwise ok when any node
// still had the lock (or had released it on an earlier try of this call).
//
// A node whose release may not have run (unanswered) is marked in r.nodes
// and one that answered is cleared: when the marked ones could keep a
// majority from anyone else, request.Release gives the lock back there in
// the background, whether or not a node confirmed the release.
func (q *quorum) release(ctx context.Context, r *request) (ok bool, err error) {
	if r.nodes == nil {
		r.nodes = make([]bool, len(q.nodes))
	}
	// No handoff: quorum waiters poll, none queues on a node.
	released, denied, errs := q.vote(ctx, r.ttl, func(ctx context.Context, n node) (bool, error) {
		return runRelease(ctx, n.c, r, false)
	})
	r.kept = 0
	for i, err := range errs {
		r.nodes[i] = unanswered(err)
		if err != nil && !r.nodes[i] {
			r.kept++ // a closed client: nothing reaches that node's grant
		}
	}
	if denied > len(q.nodes)-q.majority {
		return false, nil
	}
	if released > 0 {
		return true, nil
	}
	return false, joinNodes(errs)
}

// pollDelay is how long a quorum waiter sleeps between attempts: jittered
// so that waiters spread out, never past the holder's expiry or the poll
// interval.
func pollDelay(holderTTL, poll time.Duration) time.Duration {
	d := 10*time.Millisecond + rand.N(20*time.Millisecond)
	if holderTTL > 0 && holderTTL+time.Millisecond < d {
		d = holderTTL + time.Millisecond
	}
	return min(d, poll)
}
