package redislock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// TestJepsen_FencesIncreaseAcrossRestarts: waiters queue on several
// Lockers while redis-server restarts without persistence; a lease whose
// Acquire started after another lease was granted carries a larger fence.
func TestJepsen_FencesIncreaseAcrossRestarts(t *testing.T) {
	// Serial, subtests too: Acquire must return within 1.5s of its deadline, which
	// overran with parallel tests beside it on a loaded 2-core machine.
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			r, _ := setup(t)
			const key = "lock:jepsen-restart"
			var lockers []*redislock.Locker
			for i := range 3 {
				lockers = append(lockers, newLocker(t, newClient(t, r.Addr()), append(m.opts, redislock.WithInstance(fmt.Sprint(i)))...))
			}
			var (
				mu       sync.Mutex
				maxDone  uint64
				acquired atomic.Int64
				errs     atomic.Int64
				overruns atomic.Int64
			)
			end := time.Now().Add(6 * time.Second)
			var wg sync.WaitGroup
			wg.Go(func() {
				for _, at := range []time.Duration{1500 * time.Millisecond, 3500 * time.Millisecond} {
					time.Sleep(time.Until(end.Add(-6*time.Second + at)))
					if err := r.Restart(); err != nil {
						t.Error(err)
					}
				}
			})
			for i, l := range lockers {
				for g := range 3 {
					wg.Go(func() {
						rnd := rand.New(rand.NewPCG(uint64(i), uint64(g)))
						for time.Now().Before(end) {
							d := time.Duration(20+rnd.IntN(300)) * time.Millisecond
							ctx, cancel := context.WithTimeout(context.Background(), d)
							mu.Lock()
							floor := maxDone
							mu.Unlock()
							start := time.Now()
							lease, err := l.Acquire(ctx, key, instrument.WithTTL(2*time.Second))
							if time.Since(start)-d > 1500*time.Millisecond {
								overruns.Add(1)
							}
							cancel()
							if err != nil {
								errs.Add(1)
								time.Sleep(5 * time.Millisecond)
								continue
							}
							mu.Lock()
							if lease.Fence() <= floor {
								t.Errorf("fence %d not above %d, granted before this Acquire started", lease.Fence(), floor)
							}
							maxDone = max(maxDone, lease.Fence())
							mu.Unlock()
							time.Sleep(time.Duration(rnd.IntN(3000)) * time.Microsecond)
							rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
							_ = lease.Release(rctx)
							rcancel()
							acquired.Add(1)
						}
					})
				}
			}
			wg.Wait()
			t.Logf("acquired %d, errors %d, overruns %d", acquired.Load(), errs.Load(), overruns.Load())
			if overruns.Load() > 0 {
				t.Errorf("%d Acquire calls returned more than 1.5s after their deadline", overruns.Load())
			}
		})
	}
}
