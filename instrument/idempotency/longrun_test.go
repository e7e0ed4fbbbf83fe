package idempotency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/idempotency"
)

// TestDo_AnOwnerRunningPastTheResultTTLKeepsItsKey: fn runs longer than the
// result TTL while its lease is renewed all along. The record used to expire
// at the result TTL from its claim: a duplicate then claimed the key anew,
// with the live owner's own attempt number and fence, and ran fn beside it.
// A renewal now re-arms the record's TTL, so the duplicate finds the key in
// progress and the owner stores its result.
func TestDo_AnOwnerRunningPastTheResultTTLKeepsItsKey(t *testing.T) {
	t.Parallel()
	const lease, resultTTL = 2 * time.Second, 2500 * time.Millisecond
	s := newStore(t, single(t), idempotency.WithLease(lease), idempotency.WithResultTTL(resultTTL))
	ctx := timeout(t, time.Minute)
	var runs atomic.Int64
	started, finish := make(chan struct{}), make(chan struct{})
	type out struct {
		res idempotency.Result
		err error
	}
	first := make(chan out, 1)
	go func() {
		res, err := s.Do(ctx, "long", nil, func(context.Context, idempotency.Attempt) ([]byte, error) {
			runs.Add(1)
			close(started)
			<-finish
			return []byte("first"), nil
		})
		first <- out{res, err}
	}()
	<-started
	time.Sleep(resultTTL + time.Second) // past the result TTL from the claim
	_, err := s.Do(ctx, "long", nil, func(context.Context, idempotency.Attempt) ([]byte, error) {
		runs.Add(1)
		return []byte("second"), nil
	}, idempotency.NoWait())
	close(finish)
	o := <-first
	if !errors.Is(err, idempotency.ErrInProgress) {
		t.Errorf("a duplicate while the owner runs and renews: %v, want ErrInProgress", err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("fn ran %d times while its first run was alive and renewing", n)
	}
	if o.err != nil || string(o.res.Body) != "first" {
		t.Errorf("the owner's Do = %+v, %v; want its result stored", o.res, o.err)
	}
}
