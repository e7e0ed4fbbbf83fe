package instrument_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestStoreFailure_FailOpenDuringAReshardIsNoOutage: a slot moving between
// Redis Cluster primaries (redis-cli --cluster reshard) is no outage. The
// holder of a lock in that slot keeps renewing it, and a waiting Acquire
// waits, so a caller that does not wait (FailFast, or Retry out of
// attempts) must be refused as it would be by the holder: ErrNotAcquired.
// Taken for a store failure, it fell back under FailOpen to a
// process-local lock, a second holder of a lock the store still had, and
// counted a degraded decision for a routine operation.
func TestStoreFailure_FailOpenDuringAReshardIsNoOutage(t *testing.T) {
	t.Parallel()
	cl := testenv.NewRedisCluster(t, 3)
	ctx := withTimeout(t, time.Minute)
	for _, c := range []struct {
		name string
		opt  instrument.AcquireOption
	}{
		{"fail-fast", instrument.FailFast()},
		{"retry", instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 2)},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := fmt.Sprintf("lock:reshard:{%s}", c.name)
			holderL, err := redislock.New(cl.Client(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = holderL.Close() })
			holder, err := holderL.Acquire(ctx, key, instrument.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}

			m, err := cl.BeginKeyMigration(key)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Finish(10) })
			// The lock key on the target, its fence counter still on the
			// source: Redis refuses every script naming both (TRYAGAIN).
			if err := m.Move(key); err != nil {
				t.Fatal(err)
			}

			inner, err := redislock.New(cl.Client(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = inner.Close() })
			reg := prometheus.NewRegistry()
			g, err := instrument.NewGoverned(inner, instrument.WithStoreFailure(instrument.FailOpen),
				instrument.WithRegisterer(reg), instrument.WithoutHeartbeat())
			if err != nil {
				t.Fatal(err)
			}
			l, err := g.Acquire(ctx, key, c.opt)
			if err == nil {
				_ = l.Release(ctx)
				t.Fatalf("acquired (fence %d) while the slot moves and the holder (fence %d) renews it", l.Fence(), holder.Fence())
			}
			if !errors.Is(err, instrument.ErrNotAcquired) {
				t.Fatalf("acquire during the reshard: %v, want ErrNotAcquired", err)
			}
			if n := degradedLocks(t, reg); n != 0 {
				t.Fatalf("degraded = %v during a reshard, want 0", n)
			}
			if err := holder.Context().Err(); err != nil {
				t.Fatalf("the holder's lease ended during the reshard: %v", err)
			}
			// Release refuses to run until the slot has moved: end the
			// move first.
			if err := m.Finish(10); err != nil {
				t.Fatal(err)
			}
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
