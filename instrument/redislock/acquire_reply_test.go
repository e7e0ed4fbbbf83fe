package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// lockFence is the fence the lock value of key on c carries.
func lockFence(t *testing.T, ctx context.Context, c redis.UniversalClient, key string) uint64 {
	t.Helper()
	v, err := c.Get(ctx, key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return redislock.DecodeValue(v).Fence
}

// TestAcquire_TheFenceReportedIsTheOneTheLockCarries: the acquire scripts
// answer a bare fence when they take the lock (a table costs redis-server
// more), and an array when they do not. Both of their acquired paths must
// reach the lease as the fence the lock value carries: a first try's, and
// that of a try go-redis resends after the first one's reply was lost
// (the script finds its own token and answers the fence it wrote then,
// owned_fence), in both modes, and in quorum mode, whose fence is the
// largest of its nodes'.
func TestAcquire_TheFenceReportedIsTheOneTheLockCarries(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "fair"}[fair], func(t *testing.T) {
			t.Parallel()
			r, admin := setup(t)
			p := testenv.NewProxy(t, r.Addr())
			var opts []redislock.Option
			if fair {
				opts = append(opts, redislock.Fair())
			}
			l := newLocker(t, newClient(t, p.Addr()), opts...)
			ctx := timeout(t, time.Minute)
			ttl := instrument.WithTTL(time.Hour)
			warmUp(t, ctx, l, ttl)

			const key = "lock:fence-reply"
			var last uint64
			for _, resent := range []bool{false, true} {
				lease := acquireResent(t, ctx, l, key, ttl, p, resent)
				if got, want := lease.Fence(), lockFence(t, ctx, admin, key); got != want || got == 0 {
					t.Errorf("resent %v: the lease's fence is %d, the lock's %d", resent, got, want)
				}
				if lease.Fence() <= last {
					t.Errorf("resent %v: fence %d after %d", resent, lease.Fence(), last)
				}
				last = lease.Fence()
				if err := lease.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	t.Run("quorum", func(t *testing.T) {
		t.Parallel()
		nodes := quorumNodes(t, 3)
		cs, proxies, _ := proxiedClients(t, nodes, 1)
		l, admins, ctx, ttl := warmQuorum(t, nodes, cs, 5*time.Second)
		const key = "lock:fence-reply"
		// Node 0, whose reply is lost and resent, is ahead: its counter,
		// not the clock, makes its fence the largest, and the lease's.
		ahead := uint64(time.Now().Add(time.Hour).UnixMicro())
		if err := admins[0].Set(ctx, "{"+key+"}:fence", ahead, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		for _, resent := range []bool{false, true} {
			lease := acquireResent(t, ctx, l, key, ttl, proxies[0], resent)
			var want uint64
			for _, c := range admins {
				want = max(want, lockFence(t, ctx, c, key))
			}
			if got := lease.Fence(); got != want || got <= ahead {
				t.Errorf("resent %v: the lease's fence is %d, the largest of the nodes' locks %d (node 0's counter was %d)", resent, got, want, ahead)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// acquireResent takes key (FailFast) through l; when resent, the reply
// of its first try through p is dropped, and go-redis resends the attempt.
func acquireResent(t *testing.T, ctx context.Context, l instrument.Locker, key string, ttl instrument.AcquireOption, p *testenv.Proxy, resent bool) instrument.Lease {
	t.Helper()
	var dropped <-chan struct{}
	if resent {
		dropped = p.DropNextReply()
	}
	lease, err := l.Acquire(ctx, key, ttl, instrument.FailFast())
	if err != nil {
		t.Fatalf("resent %v: %v", resent, err)
	}
	if resent {
		select {
		case <-dropped:
		default:
			t.Fatal("no reply was dropped: the attempt was not resent")
		}
	}
	return lease
}
