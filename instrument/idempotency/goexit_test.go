package idempotency_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/idempotency"
)

// TestDo_FnThatEndsItsGoroutineReleasesTheKey: fn ending its goroutine with
// runtime.Goexit (t.FailNow inside fn does) unwinds Do without a return or a
// panic. The key must be released as after a panic, at once, and the lease's
// renewal must stop (it used to renew the key for the life of the process,
// and its goroutine leaked).
func TestDo_FnThatEndsItsGoroutineReleasesTheKey(t *testing.T) {
	t.Parallel()
	s := newStore(t, single(t), idempotency.WithLease(300*time.Millisecond))
	ctx := timeout(t, time.Minute)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Do(ctx, "goexit", nil, func(context.Context, idempotency.Attempt) ([]byte, error) {
			runtime.Goexit()
			return nil, nil
		})
	}()
	<-done
	res, err := s.Do(ctx, "goexit", nil, func(context.Context, idempotency.Attempt) ([]byte, error) {
		return []byte("ran"), nil
	}, idempotency.NoWait())
	if err != nil || string(res.Body) != "ran" || res.Replayed {
		t.Fatalf("Do right after an owner's goroutine exited = %+v, %v; want fn run (the key released)", res, err)
	}
}
