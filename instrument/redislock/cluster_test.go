package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/locktest"
	"github.com/lockgov/lockgov/internal/testenv"
)

func newClusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 addrs,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		MaxRetries:            1,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestConformance_Cluster runs the backend suite on a real 3-primary Redis
// Cluster: every key of one lock (lock, fence counter, channel) sits in one
// slot, and release notifications reach waiters connected to other nodes.
func TestConformance_Cluster(t *testing.T) {
	// locktest.Run checks goroutines against a goleak.IgnoreCurrent snapshot:
	// nothing else may run in its process.
	if inOwnProcess(t) {
		return
	}
	cl := testenv.NewRedisCluster(t, 3)
	admin := newClusterClient(t, cl.Addrs())
	locktest.Run(t,
		func(t *testing.T) instrument.Locker {
			return newLocker(t, newClusterClient(t, cl.Addrs()))
		},
		locktest.WithExpiryTTL(300*time.Millisecond),
		locktest.WithLoser(deleter(admin)),
	)
}

// TestCluster_KeysShareASlotAndNotificationsCrossNodes checks the slot rule
// for tagged and untagged keys, and that a waiter is woken by the release
// notification (its poll interval and the holder's TTL are both beyond its
// deadline) when the lock lives on another node than its pub/sub connection.
func TestCluster_KeysShareASlotAndNotificationsCrossNodes(t *testing.T) {
	t.Parallel()
	cl := testenv.NewRedisCluster(t, 3)
	c := newClusterClient(t, cl.Addrs())
	ctx := timeout(t, 30*time.Second)
	holderL, waiterL := newLocker(t, c), newLocker(t, newClusterClient(t, cl.Addrs()))

	for _, key := range []string{"lock:quota:{m-1}", "lock:order:42", "lock:order:43", "lock:order:44"} {
		lease, err := holderL.Acquire(ctx, key, instrument.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		fenceKey := "{" + key + "}:fence"
		if key == "lock:quota:{m-1}" {
			fenceKey = key + ":fence"
		}
		ks, kf := c.ClusterKeySlot(ctx, key).Val(), c.ClusterKeySlot(ctx, fenceKey).Val()
		if ks != kf {
			t.Fatalf("%s in slot %d, its fence counter %s in slot %d", key, ks, fenceKey, kf)
		}
		done := make(chan error, 1)
		waiting := make(chan struct{})
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			cfg, _ := instrument.ApplyAcquireOptions(instrument.WithTTL(time.Minute), instrument.WithPollInterval(time.Minute))
			cfg.Observer = instrument.ObserverFuncs{OnWaiting: func(w bool) {
				if w {
					close(waiting)
				}
			}}
			l, err := waiterL.Acquire(wctx, key, instrument.WithConfig(cfg))
			if err == nil {
				err = l.Release(wctx)
			}
			done <- err
		}()
		select {
		case <-waiting:
		case err := <-done:
			t.Fatalf("%s: waiter returned before waiting: %v", key, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: waiter not woken by the release notification: %v", key, err)
		}
	}
}

// TestSentinelFailover_LockNotOnNewPrimaryIsReported: a lock written to the
// primary just before it dies may be missing on the promoted replica. After
// the failover the old holder must learn it lost the lock (its next renewal
// finds no key) or the fence must prove the overlap; never a silent double
// hold.
func TestSentinelFailover_LockNotOnNewPrimaryIsReported(t *testing.T) {
	t.Parallel()
	s := testenv.NewSentinel(t)
	newFailover := func() *redis.Client {
		c := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            testenv.SentinelMaster,
			SentinelAddrs:         []string{s.Sentinel.Addr()},
			ContextTimeoutEnabled: true,
			DialTimeout:           time.Second,
			ReadTimeout:           time.Second,
			WriteTimeout:          time.Second,
			MaxRetries:            2,
		})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ca, cb := newFailover(), newFailover()
	la, lb := newLocker(t, ca), newLocker(t, cb)
	ctx := timeout(t, 60*time.Second)

	// Cut the replication link first, so that the lock exists only on the
	// primary: the write the failover loses.
	s.Link.Blackhole(true)
	a, err := la.Acquire(ctx, "lock:quota:9", instrument.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	// Wait for the promotion.
	for {
		if addr, err := s.MasterAddr(); err == nil && addr == s.Replica.Addr() {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no failover")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// B takes the lock on the new primary, where A's write never arrived.
	b, err := lb.Acquire(ctx, "lock:quota:9", instrument.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	// A must find out: its lease context ends with ErrLockLost no later
	// than its TTL, and B's fence is above A's so a fenced write refuses A.
	select {
	case <-a.Context().Done():
	case <-time.After(15 * time.Second): // A's TTL is 3s
		t.Fatal("A still believes it holds the lock 15s after the failover gave it to B")
	}
	if !errors.Is(context.Cause(a.Context()), instrument.ErrLockLost) {
		t.Fatalf("A's cause = %v, want ErrLockLost", context.Cause(a.Context()))
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("fence B %d <= fence A %d: the overlap is not provable", b.Fence(), a.Fence())
	}
}
