package workerid

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/replicaack"
)

// ErrNotReplicated matches a *NotReplicatedError: fewer replicas than WithReplicaAcks asks
// for acknowledged a claim within its timeout.
var ErrNotReplicated = errors.New("workerid: claim not acknowledged by enough replicas")

// NotReplicatedError is the error a Claim fails with, on a Registry built WithReplicaAcks,
// when fewer than Wanted replicas acknowledged the claim's write within Timeout. The
// claim ran on the primary and was released (owner-checked): a retry claims afresh.
// errors.As finds it; errors.Is(err, ErrNotReplicated) matches it.
type NotReplicatedError struct {
	// Acked is how many replicas acknowledged the write within Timeout; 0 too when the
	// deadline passed before the WAIT's reply arrived (the error then wraps
	// context.DeadlineExceeded and says the count is unknown).
	Acked  int
	Wanted int // the n of WithReplicaAcks
	// Timeout is how long WAIT was given: the WithReplicaAcks timeout (rounded up to the
	// millisecond), or less when the context's deadline left less (the error then also
	// wraps context.DeadlineExceeded), or when a WAIT sent behind a script the server had
	// lost (NOSCRIPT: a restart, a failover) used part of it.
	Timeout time.Duration
}

func (e *NotReplicatedError) Error() string {
	return fmt.Sprintf("%v: %d of %d replicas acknowledged within %v", ErrNotReplicated, e.Acked, e.Wanted, e.Timeout)
}

// Is reports that e is an ErrNotReplicated.
func (e *NotReplicatedError) Is(target error) bool { return target == ErrNotReplicated }

func notReplicated(acked, wanted int, timeout time.Duration) error {
	return &NotReplicatedError{Acked: acked, Wanted: wanted, Timeout: timeout}
}

// WithReplicaAcks makes every claim and renewal of a Redis Registry wait until n replicas
// have acknowledged its write (WAIT n timeout, in one pipeline on the script's connection),
// before the lease counts it: so that a failover to one of those replicas keeps the slot
// and its high-water mark, and a new claimant there never gets the WorkerID while this
// lease's generator still issues, nor a floor below IDs it issued.
//
//   - A Claim whose write fewer than n replicas acknowledged releases the slot
//     (owner-checked, as any failed claim) and returns an error holding a
//     *NotReplicatedError (errors.Is: ErrNotReplicated). A claim whose script answered
//     and whose WAIT's reply was lost (a broken connection) is released alike and
//     matches ErrNotReplicated with the transport error, without a *NotReplicatedError:
//     the counts are unknown.
//   - A renewal (or the re-claim of a vanished slot) that fewer acknowledged is a failed
//     renewal: the lease retries it, and its ValidUntil and reservation stay those of the
//     last acknowledged one, so the generator stops at that ValidUntil if none gets
//     through, and never issues past a reservation the replicas do not have.
//   - A Release does not wait: a release lost in a failover leaves the slot to expire and
//     the mark at the reservation, which no ID is above.
//
// n must be >= 1 and timeout > 0; timeout is rounded up to whole milliseconds and must be
// at most the client's ReadTimeout less 250ms (Redis answers a WAIT that timed out up to a
// timer tick late) and at most TTL/3 less 250ms (a renewal ends within TTL/3). A WAIT is cut
// to the context's deadline. NewRedis refuses it on a client that does not send a pipeline
// to one node on one connection (ClusterClient, Ring); NewEtcd refuses it: etcd
// acknowledges a write only once a quorum of members has it, and a new leader has it.
//
// WAIT makes no write durable on disk: a replica or primary restarted without persistence,
// or from an older snapshot or appendfsync everysec, can still lose an acknowledged mark
// (see the package doc, Failure modes).
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return optionFunc(func(c *config) {
		c.acks, c.acksSet = replicaack.New(n, timeout), true
	})
}

// checkAcks validates WithReplicaAcks against the rest of the configuration.
func (c *config) checkAcks() error {
	if !c.acksSet {
		return nil
	}
	n, timeout := c.acks.N, c.acks.Timeout
	if err := replicaack.Validate(fmt.Sprintf("WithReplicaAcks(%d, %v)", n, timeout), n, timeout); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if limit := c.renewTimeout - replicaack.ReplyMargin; time.Duration(c.acks.WaitMs())*time.Millisecond > limit {
		return fmt.Errorf("%w: WithReplicaAcks(%d, %v): timeout must be at most %v: a renewal ends within TTL/3 (%v), less %v for the WAIT's late reply",
			ErrInvalid, n, timeout, max(limit, 0).Truncate(time.Millisecond), c.renewTimeout.Round(time.Millisecond), replicaack.ReplyMargin)
	}
	return nil
}

// run runs s on the slot l's keys with args: as Script.Run without WithReplicaAcks (the
// bytes sent are those of before the option), else followed, in one pipeline, by a touch
// of the slot's high-water key and WAIT. notAcked says whether the replicas have what
// the script wrote (nil without the option): read it only when the script says it wrote.
func (b *redisBackend) run(ctx context.Context, s *redis.Script, l *leaseState, args ...any) (cmd *redis.Cmd, notAcked error) {
	keys := []string{l.key, l.hwKey, l.spaceKey}
	if !b.cfg.acks.On() {
		return s.Run(ctx, b.c, keys, args...), nil
	}
	cmd, r := b.cfg.acks.Run(ctx, ctx, b.c, s, keys, l.hwKey, args...)
	return cmd, b.cfg.acks.Check(r, ErrNotReplicated, notReplicated)
}
