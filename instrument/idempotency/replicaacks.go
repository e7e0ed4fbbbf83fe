package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated says that fewer replicas than WithReplicaAcks asks for
// acknowledged a claim or a completed record within its timeout (see
// WithReplicaAcks for what Do did). It is not a store failure:
// WithStoreFailure(instrument.FailOpen) never degrades on it.
var ErrNotReplicated = errors.New("idempotency: record not acknowledged by enough replicas")

// NotReplicatedError is the error WithReplicaAcks fails a Do with when
// fewer than Wanted replicas acknowledged its write, carrying the counts:
// errors.As finds it, and errors.Is(err, ErrNotReplicated) matches it.
type NotReplicatedError struct {
	// Acked is how many replicas acknowledged the write within Timeout;
	// 0 too when the deadline passed before the WAIT's reply arrived (the
	// error then wraps context.DeadlineExceeded and says the count is
	// unknown).
	Acked  int
	Wanted int // the n of WithReplicaAcks
	// Timeout is how long WAIT was given: the WithReplicaAcks timeout
	// (rounded up to the millisecond), or less when the caller's deadline
	// left less (the error then also wraps context.DeadlineExceeded), or
	// when a WAIT sent behind a script the server had lost (NOSCRIPT: a
	// restart, a failover) used part of it.
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

// run runs s on the record rec with args under ctx: as Script.Run without
// WithReplicaAcks (the bytes sent are those of before the option), else
// followed by the touch of rec and a WAIT cut to caller's deadline, in one
// pipeline; the returned error says whether the replicas have the write
// (nil without the option).
func (s *Store) run(ctx, caller context.Context, sc *redis.Script, rec string, args ...any) (*redis.Cmd, error) {
	if !s.cfg.acks.On() {
		return sc.Run(ctx, s.c, []string{rec}, args...), nil
	}
	cmd, r := s.cfg.acks.Run(ctx, caller, s.c, sc, []string{rec}, rec, args...)
	return cmd, s.cfg.acks.Check(r, ErrNotReplicated, notReplicated)
}
