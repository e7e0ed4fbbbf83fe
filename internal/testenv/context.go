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
