package idempotency_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/replicaack/replicaacktest"
	"github.com/lockgov/lockgov/internal/testenv"
)

// failOver kills the primary and promotes the replica, and returns a Store
// on the promoted replica: the client a failover points the caller at.
func failOver(t *testing.T, rp *testenv.Replicated) *idempotency.Store {
	t.Helper()
	return newStore(t, replicaacktest.FailOver(t, rp))
}

// counted is an fn that counts its runs and returns "charged".
func counted(runs *atomic.Int32) func(context.Context, idempotency.Attempt) ([]byte, error) {
	return func(context.Context, idempotency.Attempt) ([]byte, error) {
		runs.Add(1)
		return []byte("charged"), nil
	}
}

// TestFailover_DefaultLosesACompletedRecord is the failure mode the
// package doc states, on real servers: with asynchronous replication (the
// default), a Do whose record the primary completed but had not replicated
// is lost when the replica is promoted, and the retry of the key runs fn a
// second time. It keeps the doc honest, and it shows that the failover is
// sharp enough to lose a write, so that the WithReplicaAcks tests that use
// it are not vacuous.
func TestFailover_DefaultLosesACompletedRecord(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 2*time.Minute)
	rp := testenv.NewReplicated(t)
	s := newStore(t, testenv.NewRedisClient(t, rp.Primary.Addr()))
	var runs atomic.Int32

	rp.Link.Blackhole(true) // the record never reaches the replica
	res, err := s.Do(ctx, "pay:order-1", []byte("fp"), counted(&runs))
	if err != nil || res.Replayed || string(res.Body) != "charged" {
		t.Fatalf("Do = %+v, %v; want the first run's result", res, err)
	}
	promoted := failOver(t, rp)

	res, err = promoted.Do(ctx, "pay:order-1", []byte("fp"), counted(&runs))
	if err != nil || res.Replayed || runs.Load() != 2 {
		t.Fatalf("the retry on the promoted replica = %+v, %v with fn run %d times; the documented loss runs fn again (2 runs, not replayed)", res, err, runs.Load())
	}
}
