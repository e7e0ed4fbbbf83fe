package redisfence

import (
	"errors"
	"fmt"
	"time"
)

// ErrNotReplicated says that fewer replicas than WithReplicaAcks asks for
// acknowledged a Set's write within its timeout. The value and its fence
// are on the primary: a retry with the same fence and value reports
// written, changing nothing, and succeeds once the replicas have it. A
// failover before then may lose the write (and let a stale holder write).
var ErrNotReplicated = errors.New("redisfence: write not acknowledged by enough replicas")

// NotReplicatedError is the error WithReplicaAcks fails a Set with when
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
