package idempotency_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/replicaack/replicaacktest"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestReplicaAcks_NoAcknowledgedResultIsLostInAFailoverMidFlight: four
// goroutines run Do on fresh keys with WithReplicaAcks(1, ...) while the
// replica is stopped and resumed over and over (SIGSTOP/SIGCONT, random
// spans) and the replication link delays every chunk by 20 ms. Once 40
// calls have succeeded, with calls still in flight, the link is closed
// (in-flight chunks dropped), the primary killed and the replica promoted.
// Every key whose Do returned nil must replay on the promoted replica
// without running fn again. Without the WAIT (the option ignored), results
// returned during a stop or in the link's last 20 ms are not on the
// replica, and their retries run fn again.
func TestReplicaAcks_NoAcknowledgedResultIsLostInAFailoverMidFlight(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := testenv.NewReplicated(t)
	s := newStore(t, testenv.NewRedisClient(t, rp.Primary.Addr()), idempotency.WithReplicaAcks(1, 300*time.Millisecond))
	done := replicaacktest.MidFlight(t, ctx, rp, "pay:order", idempotency.ErrNotReplicated, func(ctx context.Context, key string) error {
		res, err := s.Do(ctx, key, []byte("fp"), func(context.Context, idempotency.Attempt) ([]byte, error) {
			return []byte(key), nil
		})
		if err == nil && string(res.Body) != key {
			return fmt.Errorf("Do = %+v, want the body %q", res, key)
		}
		return err
	})
	if t.Failed() {
		return
	}
	promoted := failOver(t, rp)

	var lost []string
	for _, key := range done {
		res, err := promoted.Do(ctx, key, []byte("fp"), func(context.Context, idempotency.Attempt) ([]byte, error) {
			return []byte("ran again"), nil
		})
		if err != nil {
			t.Fatalf("the retry of %s on the promoted replica: %v", key, err)
		}
		if !res.Replayed || string(res.Body) != key {
			lost = append(lost, key)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged results were lost in the failover and ran again: %v", len(lost), len(done), lost)
	}
}
