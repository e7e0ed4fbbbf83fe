package chaos

import (
	"context"
	"testing"
	"time"
)

// Single Redis promises exclusion (a holder learns of a loss before anyone
// else can take the lock) and the fence; the faults are between the
// clients and the lock's Redis.

var redisOpts = CheckOptions{MutexPromised: true, StrictStale: true}

func TestRedis_ProxyLatency(t *testing.T) {
	t.Parallel()
	s := newRedisSetup(t)
	run(t, s.config(t, time.Second), redisOpts, func(ctx context.Context, w *Workload, h *History) {
		for range rounds(1) {
			s.proxy.SetLatency(400 * time.Millisecond) // above TTL/3: renewals arrive late
			hold(ctx, phase(1500*time.Millisecond))
			s.proxy.SetLatency(0)
			hold(ctx, phase(300*time.Millisecond))
		}
	})
}

func TestRedis_ProxyBlackhole(t *testing.T) {
	t.Parallel()
	s := newRedisSetup(t)
	run(t, s.config(t, time.Second), redisOpts, func(ctx context.Context, w *Workload, h *History) {
		for range rounds(1) {
			s.proxy.Blackhole(true) // longer than the TTL: every lease is lost
			hold(ctx, phase(1500*time.Millisecond))
			s.proxy.Blackhole(false)
			hold(ctx, phase(300*time.Millisecond))
		}
	})
}

func TestRedis_ProxyReset(t *testing.T) {
	t.Parallel()
	s := newRedisSetup(t)
	run(t, s.config(t, time.Second), redisOpts, func(ctx context.Context, w *Workload, h *History) {
		for range rounds(5) {
			s.proxy.Reset()
			hold(ctx, phase(200*time.Millisecond))
		}
	})
}

func TestRedis_ProxyHalfOpen(t *testing.T) {
	t.Parallel()
	s := newRedisSetup(t)
	run(t, s.config(t, time.Second), redisOpts, func(ctx context.Context, w *Workload, h *History) {
		for range rounds(2) {
			s.proxy.HalfOpen() // open connections go silent; new ones work
			hold(ctx, phase(800*time.Millisecond))
		}
	})
}

// TestRedis_KillRestartAfterTTL: Redis is down for longer than the TTL, so
// every holder's lease has ended before it comes back (empty): exclusion
// holds.
func TestRedis_KillRestartAfterTTL(t *testing.T) {
	t.Parallel()
	s := newRedisSetup(t)
	run(t, s.config(t, time.Second), redisOpts, func(ctx context.Context, w *Workload, h *History) {
		for range rounds(1) {
			if err := s.lock.Kill(); err != nil {
				t.Fatal(err)
			}
			hold(ctx, phase(1500*time.Millisecond))
			// Restarted empty: every lock and fence counter is gone.
			if err := s.lock.Restart(); err != nil {
				t.Fatal(err)
			}
			hold(ctx, phase(300*time.Millisecond))
		}
	})
}

func TestRedis_SIGSTOPLongerThanTTL(t *testing.T) {
	t.Parallel()
	s := newRedisSetup(t)
	run(t, s.config(t, time.Second), redisOpts, func(ctx context.Context, w *Workload, h *History) {
		for range rounds(1) {
			if err := s.lock.Pause(); err != nil {
				t.Fatal(err)
			}
			hold(ctx, phase(1500*time.Millisecond))
			if err := s.lock.Resume(); err != nil {
				t.Fatal(err)
			}
			hold(ctx, phase(300*time.Millisecond))
		}
	})
}

// TestRedis_RestartWithinTTLLosesTheLock: Redis restarts empty (no
// persistence) while a holder with a long TTL believes it holds the lock:
// like a failover, the restart lost the lock's write, so others take it,
// and exclusion is not promised; the fence is (fences follow the server
// clock, so the restarted server's are above the lost ones).
func TestRedis_RestartWithinTTLLosesTheLock(t *testing.T) {
	t.Parallel()
	s := newRedisSetup(t)
	cfg := s.config(t, time.Second)
	probeLocker := redisLocker(t, lockClient(t, s.proxy.Addr()))
	probeRes := redisResource(t, s.res.Addr(), resourceKey)
	r := run(t, cfg, CheckOptions{MutexPromised: false, StrictStale: true}, func(ctx context.Context, w *Workload, h *History) {
		for range rounds(1) {
			p := startProbe(t, ctx, h, nClients+1, probeLocker, 10*time.Second)
			if err := s.lock.Restart(); err != nil {
				t.Fatal(err)
			}
			p.writeLate(t, ctx, h, probeRes)
		}
	})
	if r.StaleRefused == 0 {
		t.Fatalf("no stale write was refused: %v", r)
	}
}
