package testenv

import (
	"context"
	"testing"
	"time"
)

// DeadlinePassed returns a context whose deadline passed a second ago but
// whose timer fires only endsIn from now: until then Err is nil and Done is
// open. It holds still the gap a loaded machine opens between a deadline
// and its cancellation, in which a request that carried the deadline can
// already have failed on it (a read deadline taken from the context, etcd's
// server-side "request timed out") while ctx.Err() still says the caller
// waits. The test's end cancels it.
func DeadlinePassed(t testing.TB, parent context.Context, endsIn time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(parent, endsIn)
	t.Cleanup(cancel)
	return deadlinePassed{ctx, time.Now().Add(-time.Second)}
}

type deadlinePassed struct {
	context.Context
	at time.Time
}

func (c deadlinePassed) Deadline() (time.Time, bool) { return c.at, true }

// TimeLeft is the deadline DeadlineBudgets gives its third tier: seconds
// left after a store that stopped answering has failed the call.
const TimeLeft = 10 * time.Second

// DeadlineBudgets returns n caller deadlines for attacks on a client whose
// reads time out after readTimeout (NewDeadlineClient), in three tiers by
// i%3: at most readTimeout (the caller's own deadline ends its call, so it
// must never get a degraded answer), just past readTimeout (either
// outcome), and TimeLeft (it must get one).
func DeadlineBudgets(n int, readTimeout time.Duration) []time.Duration {
	b := make([]time.Duration, n)
	for i := range b {
		switch i % 3 {
		case 0:
			b[i] = 20*time.Millisecond + time.Duration(i)*readTimeout/time.Duration(n)
		case 1:
			b[i] = readTimeout + time.Millisecond + time.Duration(i)*(200*time.Millisecond)/time.Duration(n)
		case 2:
			b[i] = TimeLeft
		}
	}
	return b
}
