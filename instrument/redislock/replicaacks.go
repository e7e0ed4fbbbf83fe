package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
	"github.com/lockgov/lockgov/internal/replicaack"
)

// ErrNotReplicated says that fewer replicas than WithReplicaAcks asks for
// acknowledged a lock write within its timeout. An Acquire that returns it
// has given the lock back; a renewal that returns it did not extend the
// lease. It is a store failure for instrument.Govern (see "Replica
// acknowledgements" in the package doc).
var ErrNotReplicated = errors.New("redislock: lock write not acknowledged by enough replicas")

// NotReplicatedError is the error WithReplicaAcks fails a lock write with
// when fewer than Wanted replicas acknowledged it, carrying the counts:
// errors.As finds it, and errors.Is(err, ErrNotReplicated) matches it.
type NotReplicatedError struct {
	Acked  int // replicas that acknowledged the write within Timeout
	Wanted int // the n of WithReplicaAcks
	// Timeout is how long WAIT was given: the WithReplicaAcks timeout
	// (rounded up to the millisecond), or less when the caller's deadline
	// left less (the error then also wraps context.DeadlineExceeded).
	Timeout time.Duration
}

func (e *NotReplicatedError) Error() string {
	return fmt.Sprintf("%v: %d of %d replicas acknowledged within %v", ErrNotReplicated, e.Acked, e.Wanted, e.Timeout)
}

// Is reports that e is an ErrNotReplicated.
func (e *NotReplicatedError) Is(target error) bool { return target == ErrNotReplicated }

// replicaAcks is WithReplicaAcks: n replicas within timeout (n 0: none).
type replicaAcks struct {
	n       int
	timeout time.Duration
	set     bool
}

// on says acks are asked for.
func (a replicaAcks) on() bool { return a.n > 0 }

// waitMs is the timeout WAIT is sent with: in whole milliseconds, rounded
// up. WAIT n 0 blocks until n replicas answer, so a timeout New accepts
// (> 0) but under a millisecond must not truncate to it: it would wait out
// the client's read timeout instead (and go-redis would resend the
// pipeline), failing with a transport error rather than ErrNotReplicated.
func (a replicaAcks) waitMs() int64 { return a.shared().WaitMs() }

// waitArg is WAIT's timeout in milliseconds for a send under ctx, and
// whether ctx's deadline shortened it: the configured timeout (waitMs), or
// what the deadline leaves after waitReplyMargin for the late reply, at
// least a millisecond (WAIT 0 blocks). A WAIT that outwaits the caller's
// deadline is cut by it: with ContextTimeoutEnabled the read deadline
// fails the pipeline with an i/o timeout and go-redis drops the
// connection; without it nothing but the WAIT's timeout bounds the read,
// and the caller waited out the whole timeout past its deadline. The
// arithmetic is quota's, idempotency's and workerid's (internal/replicaack),
// with the send's context the caller's.
func (a replicaAcks) waitArg(ctx context.Context) (ms int64, cut bool) {
	return a.shared().WaitArg(ctx, ctx)
}

func (a replicaAcks) shared() replicaack.Acks { return replicaack.Acks{N: a.n, Timeout: a.timeout} }

// ackReply is the answer of the WAIT that followed a command: how many
// replicas acknowledged the connection's writes up to it, or why WAIT did
// not answer; and the timeout it was sent with (ms), cut when the
// caller's deadline shortened it (waitArg).
type ackReply struct {
	n   int64
	err error
	ms  int64
	cut bool
}

// check returns nil when the WAIT that followed a lock write says at least
// a.n replicas acknowledged it, else the error the caller returns: WAIT's
// own (a transport error, which the caller judges as any other), or
// a *NotReplicatedError with the count, marked as the store out of reach
// (storefail.Unreachable) so that Govern's store-failure policy applies.
// The message carries no key: the store-failure log prints it.
func (a replicaAcks) check(r ackReply) error {
	if r.err != nil {
		return fmt.Errorf("WAIT %d %v: %w", a.n, a.timeout, r.err)
	}
	if r.n < int64(a.n) {
		e := &NotReplicatedError{Acked: int(r.n), Wanted: a.n, Timeout: time.Duration(r.ms) * time.Millisecond}
		if r.cut {
			// Not the store's failure: the caller left WAIT less time than
			// a replica was given to acknowledge (and Unavailable reads a
			// context error outside an Unreachable mark as the caller's).
			return fmt.Errorf("%w: %w (the timeout %v cut to fit the context's deadline)", context.DeadlineExceeded, e, a.timeout)
		}
		return storefail.Unreachable(e)
	}
	return nil
}

// checkAcquire is check for an acquire attempt: one whose WAIT the
// caller's deadline cut short fails as an Acquire whose context ended
// (ErrNotAcquired and context.DeadlineExceeded), which it is about to.
func (a replicaAcks) checkAcquire(r ackReply) error {
	err := a.check(r)
	if err != nil && r.err == nil && r.cut {
		return fmt.Errorf("%w: %w", instrument.ErrNotAcquired, err)
	}
	return err
}

// checkClient refuses acks on a client that cannot put WAIT on the
// connection that ran the script, or that would time out reading its
// reply. WAIT counts the acknowledgements of one connection's writes, so it
// must follow the script in one pipeline on one connection to the node
// that ran it: a *redis.Client (one node, or Sentinel's primary through
// NewFailoverClient) does; a ClusterClient splits a pipeline by slot and
// sends a keyless WAIT to a node of its own choosing, a Ring likewise.
func (a replicaAcks) checkClient(c redis.UniversalClient) error {
	if !a.on() {
		return nil
	}
	rc, ok := c.(*redis.Client)
	if !ok {
		return fmt.Errorf("%w: redislock: WithReplicaAcks needs a *redis.Client (one node, or Sentinel through NewFailoverClient), not %T: WAIT must run on the connection and node that ran the lock script", instrument.ErrInvalidOption, c)
	}
	// A pipeline's replies are read within ReadTimeout (> 0: a limit), and
	// the WAIT's comes up to waitReplyMargin after its timeout.
	if rt := rc.Options().ReadTimeout; rt > 0 && time.Duration(a.waitMs())*time.Millisecond > rt-waitReplyMargin {
		return fmt.Errorf("%w: redislock: replica ack timeout %v must be at most %v: the client's ReadTimeout %v less %v for the WAIT's late reply (Redis answers a WAIT that timed out at its next timer tick)", instrument.ErrInvalidOption, a.timeout, max(rt-waitReplyMargin, 0), rt, waitReplyMargin)
	}
	return nil
}

// waitReplyMargin is how much later than its timeout a WAIT's reply may
// arrive: Redis ends a WAIT that timed out at its next timer tick, every
// 1000/hz ms (100ms at the default hz 10; measured here, redis 7.0: WAIT 1
// 500 with the replica stopped answers after 600ms), and the reply must
// then reach the client on a loaded machine. A timeout closer than that to
// the client's ReadTimeout had its pipeline's reply arrive after go-redis's
// read deadline: an i/o timeout, the connection dropped and the whole
// pipeline resent (each WAIT waiting again), instead of ErrNotReplicated.
// It assumes hz >= 10; a server run with a lower hz answers later still.
// quota and idempotency use the same one.
const waitReplyMargin = replicaack.ReplyMargin
