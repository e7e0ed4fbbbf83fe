package snowflake_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// contendedClock is the system clock whose wall reading the test steps back; the
// monotonic clock does not move with it.
type contendedClock struct{ off atomic.Int64 }

func (c *contendedClock) Wall() time.Time     { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *contendedClock) Mono() time.Duration { return time.Duration(time.Now().UnixNano()) }

// contendedCall is one NextID: logical start and end ticks of one shared counter, so
// that "finished before the other began" is exact, and its ID.
type contendedCall struct {
	start, end int64
	id         int64
}

// checkContendedCalls fails on a duplicate ID, an ID not above the same goroutine's
// previous one, or an ID not above every ID returned by a call that ended
// before its own began (linearizable order).
func checkContendedCalls(t *testing.T, per [][]contendedCall) {
	t.Helper()
	var all []contendedCall
	seen := map[int64]bool{}
	for g, cs := range per {
		for i, c := range cs {
			if seen[c.id] {
				t.Fatalf("duplicate ID %d", c.id)
			}
			seen[c.id] = true
			if i > 0 && c.id <= cs[i-1].id {
				t.Fatalf("goroutine %d: ID %d after %d", g, c.id, cs[i-1].id)
			}
		}
		all = append(all, cs...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].end < all[j].end })
	prefixMax := make([]int64, len(all))
	for i, c := range all {
		prefixMax[i] = c.id
		if i > 0 {
			prefixMax[i] = max(prefixMax[i], prefixMax[i-1])
		}
	}
	for _, c := range all {
		k := sort.Search(len(all), func(i int) bool { return all[i].end >= c.start }) // calls [0,k) ended before c began
		if k > 0 && prefixMax[k-1] >= c.id {
			t.Fatalf("ID %d (call began at tick %d) is not above ID %d of a call that had already returned", c.id, c.start, prefixMax[k-1])
		}
	}
}

// TestContentionAttack_UniqueIncreasingLinearizableAcrossClockSteps: 16 and
// 64 goroutines on one generator at GOMAXPROCS 2 and 8, losing the CAS to
// each other constantly (stepping aside each time), on a short sequence
// that runs out every millisecond and on the default layout, while one
// goroutine steps the wall clock back (within MaxWait: the generator waits)
// and once beyond MaxWait (callers get *ClockBackwardsError, nothing else).
//
// Not parallel: it sets GOMAXPROCS, which is the process's.
func TestContentionAttack_UniqueIncreasingLinearizableAcrossClockSteps(t *testing.T) {
	for _, procs := range []int{2, 8} {
		for _, workers := range []int{16, 64} {
			for _, layout := range []snowflake.Layout{{TimeBits: 41, WorkerBits: 14, SequenceBits: 8}, snowflake.DefaultLayout} {
				t.Run(fmt.Sprintf("procs%d/goroutines%d/seq%d", procs, workers, layout.SequenceBits), func(t *testing.T) {
					defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
					clk := &contendedClock{}
					g, err := snowflake.New(3, snowflake.WithLayout(layout), snowflake.WithClock(clk))
					if err != nil {
						t.Fatal(err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					const each = 800
					var tick atomic.Int64
					per := make([][]contendedCall, workers)
					var wg sync.WaitGroup
					for w := range workers {
						wg.Go(func() {
							cs := make([]contendedCall, 0, each)
							for i := range each {
								if w == 0 && i%100 == 50 {
									if i == 450 {
										clk.off.Add(int64(-40 * time.Millisecond)) // beyond MaxWait
									} else {
										clk.off.Add(int64(-3 * time.Millisecond))
									}
								}
								start := tick.Add(1)
								id, err := g.NextID(ctx)
								end := tick.Add(1)
								if err != nil {
									if _, ok := errors.AsType[*snowflake.ClockBackwardsError](err); ok {
										continue
									}
									t.Errorf("goroutine %d: %v", w, err)
									return
								}
								cs = append(cs, contendedCall{start, end, id})
							}
							per[w] = cs
						})
					}
					wg.Wait()
					checkContendedCalls(t, per)
				})
			}
		}
	}
}

// TestContentionAttack_NoIDAfterTheWorkerLeaseIsLost: 32 goroutines contend
// on a generator bound to a Redis WorkerID lease; Redis dies mid-run, so the
// lease cannot be renewed and the generator must stop. Once any call has
// returned ErrWorkerLeaseLost, no call that begins afterwards gets an ID
// unless the lease was confirmed again since (ErrWorkerLeaseLost also means
// "could have expired by now", and a renewal sent before Redis died can
// still confirm it after a starved renewal goroutine let the old deadline
// pass); the IDs issued before are unique, increasing and linearizable.
//
// Not parallel: it sets GOMAXPROCS, which is the process's.
func TestContentionAttack_NoIDAfterTheWorkerLeaseIsLost(t *testing.T) {
	for _, procs := range []int{2, 8} {
		t.Run(fmt.Sprintf("procs%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			r := testenv.NewRedis(t)
			c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
			defer c.Close()
			reg, err := workerid.NewRedis(c, workerid.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lease, err := reg.Claim(ctx, "auth")
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
				defer rcancel()
				_ = lease.Release(rctx)
			}()
			g, err := snowflake.New(lease.WorkerID(), snowflake.WithLease(lease))
			if err != nil {
				t.Fatal(err)
			}
			const workers = 32
			var (
				tick     atomic.Int64
				killed   atomic.Bool
				lostAt   int64 // end tick of the latest ErrWorkerLeaseLost (under mu); 0: none yet
				lostVU   int64 // the lease's ValidUntil read before the calls that failed, latest (under mu)
				issued   atomic.Int64
				mu       sync.Mutex
				afterErr []string
			)
			per := make([][]contendedCall, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					var cs []contendedCall
					extra := 0
					var myVU int64 // ValidUntil read before this goroutine's latest failed call
					// confirmedSince says whether the lease was confirmed again
					// after a failure judged against ValidUntil vu.
					confirmedSince := func(vu int64) bool { return lease.State().ValidUntil.UnixNano() > vu }
					for extra < 50 {
						if ctx.Err() != nil {
							t.Errorf("goroutine %d: the generator still issued IDs %s after Redis died", w, 30*time.Second)
							return
						}
						if w == 0 && issued.Load() > 20000 && !killed.Swap(true) {
							if err := r.Kill(); err != nil {
								t.Error(err)
							}
						}
						vu := lease.State().ValidUntil.UnixNano()
						start := tick.Add(1)
						id, err := g.NextID(ctx)
						end := tick.Add(1)
						if err != nil {
							if !errors.Is(err, snowflake.ErrWorkerLeaseLost) {
								t.Errorf("goroutine %d: %v", w, err)
								return
							}
							mu.Lock()
							lostAt, lostVU = max(lostAt, end), max(lostVU, vu)
							mu.Unlock()
							myVU = vu
							extra++
							continue
						}
						issued.Add(1)
						mu.Lock()
						l, lvu := lostAt, lostVU
						mu.Unlock()
						if l != 0 && start > l && !confirmedSince(lvu) {
							mu.Lock()
							afterErr = append(afterErr, fmt.Sprintf("goroutine %d: ID %d from a call that began (tick %d) after ErrWorkerLeaseLost was returned (tick %d), the lease not confirmed since", w, id, start, l))
							mu.Unlock()
						}
						if extra > 0 && !confirmedSince(myVU) {
							mu.Lock()
							afterErr = append(afterErr, fmt.Sprintf("goroutine %d: ID %d after this goroutine got ErrWorkerLeaseLost, the lease not confirmed since", w, id))
							mu.Unlock()
						}
						cs = append(cs, contendedCall{start, end, id})
					}
					per[w] = cs
				})
			}
			wg.Wait()
			if !killed.Load() {
				t.Fatal("Redis was never killed: the attack did not happen")
			}
			for _, e := range afterErr {
				t.Error(e)
			}
			checkContendedCalls(t, per)
		})
	}
}
