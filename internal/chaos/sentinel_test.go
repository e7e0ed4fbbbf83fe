package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
)

// TestSentinel_FailoverLosesTheLockWrite: the replication link is cut, so
// locks taken from then on exist only on the primary; the primary dies and
// Sentinel promotes the replica, where those locks never arrived. Other
// clients can take a lock an old holder still believes it holds: exclusion
// is not promised here, only the fence (the new primary's fences follow its
// clock, above every fence the old one issued).
func TestSentinel_FailoverLosesTheLockWrite(t *testing.T) {
	t.Parallel()
	s := testenv.NewSentinel(t)
	res := testenv.NewRedis(t)
	const ttl = 3 * time.Second // longer than the failover: old holders outlive it
	cfg := Config{Key: lockKey, TTL: ttl, Work: ttl / 20, Reader: redisResource(t, res.Addr(), resourceKey)}
	newClient := func() *redis.Client {
		c := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            testenv.SentinelMaster,
			SentinelAddrs:         []string{s.Sentinel.Addr()},
			ContextTimeoutEnabled: true,
			DialTimeout:           300 * time.Millisecond,
			ReadTimeout:           500 * time.Millisecond,
			WriteTimeout:          500 * time.Millisecond,
			MaxRetries:            1,
			PoolSize:              4,
		})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	for range nClients {
		cfg.Clients = append(cfg.Clients, Client{
			Locker:   redisLocker(t, newClient()),
			Resource: redisResource(t, res.Addr(), resourceKey),
		})
	}
	probeLocker := redisLocker(t, newClient())
	probeRes := redisResource(t, res.Addr(), resourceKey)
	var p *probe
	r := run(t, cfg, CheckOptions{MutexPromised: false, StrictStale: true}, func(ctx context.Context, w *Workload, h *History) {
		s.Link.Blackhole(true)
		if err := w.WaitAccepted(ctx, 3); err != nil { // locks only the primary has
			t.Fatal(err)
		}
		// The probe's lock, too, exists only on the primary; its TTL
		// outlives the failover.
		p = startProbe(t, ctx, h, nClients+1, probeLocker, 10*time.Second)
		if err := s.Primary.Kill(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "Sentinel promotes the replica", func() bool {
			addr, err := s.MasterAddr()
			return err == nil && addr == s.Replica.Addr()
		})
		p.writeLate(t, ctx, h, probeRes)
	})
	if r.StaleRefused == 0 {
		t.Fatalf("no stale write was refused: %v", r)
	}
}
