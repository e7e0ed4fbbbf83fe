package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// TestJepsen_ExclusionUnderRandomCancellation: several Lockers, several
// goroutines each, random deadlines and cancellations while waiting; at most
// one holder at a time, fences increase holder to holder, no lease is lost,
// no Acquire returns long after its deadline, and nothing is left held.
func TestJepsen_ExclusionUnderRandomCancellation(t *testing.T) {
	// An Acquire returns by its deadline (the timeout rule), give or take
	// the scheduling of a loaded 2-core machine: a redial under the
	// notifier's lock once cost 4.9 s.
	const maxOverrun = time.Second
	for _, m := range modes {
		for _, chaos := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/chaos=%v", m.name, chaos), func(t *testing.T) {
				r, admin := setup(t)
				const key = "lock:jepsen"
				var lockers []*redislock.Locker
				for i := range 3 {
					lockers = append(lockers, newLocker(t, newClient(t, r.Addr()), append(m.opts, redislock.WithInstance(fmt.Sprint(i)))...))
				}
				var (
					inside    atomic.Int32
					mu        sync.Mutex
					lastFence uint64
					acquired  atomic.Int64
					gaveUp    atomic.Int64
					overruns  atomic.Int64
					maxOver   atomic.Int64
				)
				end := time.Now().Add(5 * time.Second)
				var wg sync.WaitGroup
				if chaos {
					wg.Go(func() {
						for time.Now().Before(end) {
							time.Sleep(time.Duration(50+rand.IntN(100)) * time.Millisecond)
							_ = admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Err()
						}
					})
				}
				for i, l := range lockers {
					for g := range 4 {
						wg.Go(func() {
							rnd := rand.New(rand.NewPCG(uint64(i), uint64(g)))
							for time.Now().Before(end) {
								d := time.Duration(5+rnd.IntN(150)) * time.Millisecond
								ctx, cancel := context.WithTimeout(context.Background(), d)
								if rnd.IntN(4) == 0 {
									// cancel at a random moment instead
									c2 := time.AfterFunc(time.Duration(rnd.IntN(int(d))), cancel)
									defer c2.Stop()
								}
								start := time.Now()
								lease, err := l.Acquire(ctx, key, instrument.WithTTL(3*time.Second))
								if over := time.Since(start) - d; over > maxOverrun {
									overruns.Add(1)
									if int64(over) > maxOver.Load() {
										maxOver.Store(int64(over))
									}
								}
								cancel()
								if err != nil {
									if !errors.Is(err, instrument.ErrNotAcquired) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
										t.Errorf("Acquire: %v", err)
										return
									}
									gaveUp.Add(1)
									continue
								}
								if n := inside.Add(1); n != 1 {
									t.Errorf("%d holders at once (fence %d)", n, lease.Fence())
								}
								mu.Lock()
								if lease.Fence() <= lastFence {
									t.Errorf("fence %d not above the previous holder's %d", lease.Fence(), lastFence)
								}
								lastFence = lease.Fence()
								mu.Unlock()
								time.Sleep(time.Duration(rnd.IntN(3000)) * time.Microsecond)
								if err := lease.Context().Err(); err != nil {
									t.Errorf("lease lost while held: %v", context.Cause(lease.Context()))
								}
								inside.Add(-1)
								rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
								if err := lease.Release(rctx); err != nil {
									t.Errorf("Release: %v", err)
								}
								rcancel()
								acquired.Add(1)
							}
						})
					}
				}
				wg.Wait()
				t.Logf("acquired %d, gave up %d, overruns>%v %d (max %v)", acquired.Load(), gaveUp.Load(), maxOverrun, overruns.Load(), time.Duration(maxOver.Load()))
				if overruns.Load() > 0 {
					t.Errorf("%d Acquire calls returned more than %v after their deadline (max %v)", overruns.Load(), maxOverrun, time.Duration(maxOver.Load()))
				}
				// Close waits for the leaves of waiters that gave up, which
				// run after their Acquire returned.
				for _, l := range lockers {
					_ = l.Close()
				}
				ctx := timeout(t, 5*time.Second)
				if v, err := admin.Get(ctx, key).Result(); err == nil {
					t.Errorf("lock still held after everyone finished: %q (PTTL %v), queue %q", v, admin.PTTL(ctx, key).Val(), admin.LRange(ctx, queueKey(key), 0, -1).Val())
				}
			})
		}
	}
}
