package quota

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated says that fewer replicas than WithReplicaAcks asks for
// acknowledged a Deduct's or Refund's write within its timeout. The write
// ran on the primary: a retry with the same request id applies it at most
// once. It is not a store failure: WithFallback never decides such a call.
var ErrNotReplicated = errors.New("quota: write not acknowledged by enough replicas")

// NotReplicatedError is the error WithReplicaAcks fails a write with when
// fewer than Wanted replicas acknowledged it, carrying the counts:
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

// run runs s on keys with args: as Script.Run without WithReplicaAcks (the
// bytes sent are those of before the option), else followed by the touch
// of record and WAIT in one pipeline; the returned error says whether the
// replicas have the write (nil without the option).
func (q *Quota) run(ctx context.Context, s *redis.Script, keys []string, record string, args ...any) (*redis.Cmd, error) {
	if !q.cfg.acks.On() {
		return s.Run(ctx, q.c, keys, args...), nil
	}
	cmd, r := q.cfg.acks.Run(ctx, ctx, q.c, s, keys, record, args...)
	return cmd, q.cfg.acks.Check(r, ErrNotReplicated, notReplicated)
}
