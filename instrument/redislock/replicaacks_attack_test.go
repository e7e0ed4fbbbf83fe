package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestReplicaAcks_ASubMillisecondTimeoutStillBoundsTheWait: WAIT takes its
// timeout in whole milliseconds, and WAIT n 0 blocks until n replicas
// answer. A timeout New accepts (> 0, below the read timeout) but under a
// millisecond must not become WAIT n 0: with the replica stopped, the
// Acquire fails with ErrNotReplicated once the timeout (rounded up to the
// millisecond) has passed, not with the client's read timeout on a WAIT
// that never answers (after which go-redis resends the whole pipeline).
func TestReplicaAcks_ASubMillisecondTimeoutStillBoundsTheWait(t *testing.T) {
	ctx := timeout(t, 2*time.Minute)
	rp := newReplicated(t, ctx)
	l := newLocker(t, ackClient(t, rp.primary.Addr()), redislock.WithReplicaAcks(1, 500*time.Microsecond))
	rp.pauseReplica(t)

	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	const key = "lock:replica-acks-sub-ms"
	lease, err := l.Acquire(actx, key, instrument.WithTTL(time.Hour), instrument.FailFast())
	if err == nil {
		_ = lease.Release(ctx)
		t.Fatal("Acquire succeeded although no replica acknowledged the lock")
	}
	if !errors.Is(err, redislock.ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1 replicas acknowledged") {
		t.Fatalf("Acquire = %v, want ErrNotReplicated saying 0 of 1 replicas acknowledged (a WAIT with timeout 0 blocks until the read timeout)", err)
	}
	testenv.WaitFor(t, giveBackWithin, "the give-back of the unacknowledged lock to end", func() bool {
		return redislock.PendingLeaves(l) == 0
	})
	if n := rp.cp.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("the unacknowledged lock is still on the primary (EXISTS %d)", n)
	}
}
