package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

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

// TestStoreFailure_FailOpenLostReplyDuringAReshardIsNoOutage (h111): the
// same under a lost reply. A Govern acquire with FailOpen takes the lock
// in Redis (FailFast, and Retry with two attempts), but its reply is lost;
// before go-redis resends it, the lock's slot is opened for migration and
// the lock key moved, so the resend and every attempt after it get
// TRYAGAIN. The store's copy, under the lost try's token, is live: the
// caller must be refused (ErrNotAcquired, no degraded decision, no
// process-local lock beside it), and once the slot has moved the lock must
// be free again (given back), not held for its ten minutes by nobody, and taken
// from the store (a fence), not locally.
func TestStoreFailure_FailOpenLostReplyDuringAReshardIsNoOutage(t *testing.T) {
	t.Parallel()
	cl := testenv.NewRedisCluster(t, 3)
	ctx := withTimeout(t, 2*time.Minute)
	for _, c := range []struct {
		name string
		opt  instrument.AcquireOption
	}{
		{"fail-fast", instrument.FailFast()},
		{"retry", instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 2)},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := fmt.Sprintf("lock:reshard-lost:{%s}", c.name)
			client := cl.Client(t)
			sha := &acquireSHA{key: key}
			var m *testenv.SlotMigration
			resend := &testenv.ResendOnce{Between: func() {
				var err error
				if m, err = cl.BeginKeyMigration(key); err != nil {
					t.Errorf("begin the migration: %v", err)
					return
				}
				if err := m.Move(key); err != nil {
					t.Errorf("move the lock key: %v", err)
				}
			}}
			client.AddHook(sha)
			client.AddHook(resend)
			inner, err := redislock.New(client)
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
			// Loads the script on the key's node and names its digest.
			warm, err := g.Acquire(ctx, key, instrument.FailFast())
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if resend.SHA = sha.get(); resend.SHA == "" {
				t.Fatal("no acquire script was seen on the warm-up")
			}

			resend.Arm()
			l, err := g.Acquire(ctx, key, instrument.WithTTL(10*time.Minute), c.opt)
			if m != nil {
				t.Cleanup(func() { _ = m.Finish(10) })
			}
			if !resend.Resent() || m == nil {
				t.Fatalf("the acquire was not run twice around a migration's start (Acquire: %v)", err)
			}
			if err == nil {
				_ = l.Release(ctx)
				t.Fatalf("acquired (fence %d) while the slot moves and the lost try's lock is live", l.Fence())
			}
			if !errors.Is(err, instrument.ErrNotAcquired) {
				t.Fatalf("acquire during the reshard: %v, want ErrNotAcquired", err)
			}
			if n := degradedLocks(t, reg); n != 0 {
				t.Fatalf("degraded = %v during a reshard, want 0", n)
			}
			if err := client.Get(ctx, key).Err(); err != nil {
				t.Fatalf("the lost try's lock is not in the store during the move (%v): the premise does not hold", err)
			}
			if err := m.Finish(10); err != nil {
				t.Fatal(err)
			}
			// Given back after the move, well before its ten minutes.
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			next, err := g.Acquire(wctx, key, instrument.WithTTL(10*time.Second), instrument.WaitUntilDeadline())
			if err != nil {
				t.Fatalf("the lock is not free after the move: %v", err)
			}
			if next.Fence() == 0 {
				t.Fatal("the lock after the move is a process-local one (fence 0)")
			}
			if err := next.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if n := degradedLocks(t, reg); n != 0 {
				t.Fatalf("degraded = %v, want 0", n)
			}
		})
	}
}

// acquireSHA records the digest of the first two-key script (acquire.lua)
// run on key through the client it hooks: redislock's script, whose source
// this package does not see, for a testenv.ResendOnce.
type acquireSHA struct {
	key string
	mu  sync.Mutex
	sha string
}

func (h *acquireSHA) get() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sha
}

func (h *acquireSHA) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *acquireSHA) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *acquireSHA) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if cmd.Name() == "evalsha" && len(a) > 3 && fmt.Sprint(a[2]) == "2" && argString(a[3]) == h.key {
			h.mu.Lock()
			if h.sha == "" {
				h.sha = argString(a[1])
			}
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

// argString is a command argument as Redis gets it: redislock passes some
// as *string (go-redis writes them in place).
func argString(v any) string {
	if p, ok := v.(*string); ok {
		return *p
	}
	return fmt.Sprint(v)
}
