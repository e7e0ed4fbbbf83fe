package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestQuorum_MajorityRestartedLosesTheLock: three independent primaries in
// quorum mode; a holder with a long TTL holds the lock when two of them
// restart empty, so a majority no longer knows of its lock and others take
// it. Quorum mode promises only the fence (NewQuorum's doc): the late write
// must be refused.
func TestQuorum_MajorityRestartedLosesTheLock(t *testing.T) {
	t.Parallel()
	nodes := []*testenv.Redis{testenv.NewRedis(t), testenv.NewRedis(t), testenv.NewRedis(t)}
	res := testenv.NewRedis(t)
	quorum := func() instrument.Locker {
		var cs []redis.UniversalClient
		for _, n := range nodes {
			cs = append(cs, lockClient(t, n.Addr()))
		}
		raw, err := redislock.NewQuorum(cs)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = raw.Close() })
		g, err := instrument.NewGoverned(raw)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		return g
	}
	cfg := Config{Key: lockKey, TTL: time.Second, Work: time.Second / 20, Reader: redisResource(t, res.Addr(), resourceKey)}
	for range nClients {
		cfg.Clients = append(cfg.Clients, Client{Locker: quorum(), Resource: redisResource(t, res.Addr(), resourceKey)})
	}
	probeLocker := quorum()
	probeRes := redisResource(t, res.Addr(), resourceKey)
	r := run(t, cfg, CheckOptions{MutexPromised: false, StrictStale: true}, func(ctx context.Context, w *Workload, h *History) {
		for i := range rounds(1) {
			p := startProbe(t, ctx, h, nClients+1, probeLocker, 10*time.Second)
			for _, n := range []*testenv.Redis{nodes[i%3], nodes[(i+1)%3]} {
				if err := n.Restart(); err != nil {
					t.Fatal(err)
				}
			}
			p.writeLate(t, ctx, h, probeRes)
		}
	})
	if r.StaleRefused == 0 {
		t.Fatalf("no stale write was refused: %v", r)
	}
}
