package idempotency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestReplicaAcks_ALeaseShorterThanTheWaitStillReportsNotReplicated: the
// completed record's write runs under a deadline of the lease (it must
// outlive the caller's), and its WAIT is given the WithReplicaAcks timeout.
// With a lease of 300ms, a timeout of 2s and the replica stopped while fn
// runs, Do must report fn's result with a *NotReplicatedError (the store
// answered; the record is done on the primary), under FailOpen too: not a
// store error. Before the fix the WAIT outlived the write's deadline, the
// pipeline's read timed out, go-redis resent it until the deadline, and Do
// said "store the result: context deadline exceeded" for a stored result.
func TestReplicaAcks_ALeaseShorterThanTheWaitStillReportsNotReplicated(t *testing.T) {
	t.Parallel()
	for _, policy := range []instrument.StoreFailurePolicy{instrument.FailClosed, instrument.FailOpen} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, 2*time.Minute)
			rp := testenv.NewReplicated(t)
			cp := testenv.NewRedisClient(t, rp.Primary.Addr())
			s := newStore(t, cp, idempotency.WithLease(300*time.Millisecond),
				idempotency.WithReplicaAcks(1, 2*time.Second), idempotency.WithStoreFailure(policy))
			var runs atomic.Int32
			res, err := s.Do(ctx, "pay:order-1", []byte("fp"), func(ctx context.Context, a idempotency.Attempt) ([]byte, error) {
				rp.PauseReplica(t) // after the claim was acknowledged
				return counted(&runs)(ctx, a)
			})
			var nr *idempotency.NotReplicatedError
			if !errors.As(err, &nr) {
				t.Fatalf("Do = %+v, %v; want fn's result with a *NotReplicatedError", res, err)
			}
			if string(res.Body) != "charged" || res.Degraded {
				t.Fatalf("Do = %+v; want fn's result, not degraded", res)
			}
			if st := recordState(t, ctx, cp, "pay:order-1"); st != "done" {
				t.Fatalf("the record is %q on the primary, want done", st)
			}
		})
	}
}
