package etcdlock_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockgov/lockgov/internal/testenv"
)

const (
	contenders = 8
	holdFor    = time.Millisecond
)

// contend runs b.N acquisitions of one key spread over 8 goroutines that
// each hold it ~1 ms, and reports acquisitions/s, the p50/p99 wait, and
// where a cycle's time goes: the median hold (the 1 ms sleep as this
// machine serves it) and the median handoff, from the holder calling
// unlock to the next holder's lock returning. lock returns an unlock
// function.
func contend(b *testing.B, newLock func(b *testing.B) func(ctx context.Context) (func(), error)) {
	locks := make([]func(ctx context.Context) (func(), error), contenders)
	for i := range locks {
		locks[i] = newLock(b)
	}
	var (
		left  atomic.Int64
		mu    sync.Mutex
		waits []time.Duration
		holds []time.Duration
		hands []time.Duration
		wg    sync.WaitGroup
		// unlockAt is when the last holder called unlock (UnixNano), 0 once
		// the next holder has taken the lock.
		unlockAt atomic.Int64
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for _, lock := range locks {
		wg.Go(func() {
			var mine, held, handed []time.Duration
			for left.Add(-1) >= 0 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				t0 := time.Now()
				unlock, err := lock(ctx)
				cancel()
				if err != nil {
					b.Error(err)
					return
				}
				got := time.Now()
				mine = append(mine, got.Sub(t0))
				if u := unlockAt.Swap(0); u != 0 {
					handed = append(handed, got.Sub(time.Unix(0, u)))
				}
				time.Sleep(holdFor)
				held = append(held, time.Since(got))
				unlockAt.Store(time.Now().UnixNano())
				unlock()
			}
			mu.Lock()
			waits = append(waits, mine...)
			holds = append(holds, held...)
			hands = append(hands, handed...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if len(waits) == 0 {
		return
	}
	slices.Sort(waits)
	b.ReportMetric(float64(len(waits))/elapsed.Seconds(), "acq/s")
	b.ReportMetric(float64(waits[len(waits)/2].Microseconds())/1000, "p50-wait-ms")
	b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds())/1000, "p99-wait-ms")
	slices.Sort(holds)
	b.ReportMetric(float64(holds[len(holds)/2].Microseconds())/1000, "p50-hold-ms")
	if len(hands) > 0 {
		slices.Sort(hands)
		b.ReportMetric(float64(hands[len(hands)/2].Microseconds())/1000, "p50-handoff-ms")
		b.ReportMetric(float64(hands[len(hands)*9/10].Microseconds())/1000, "p90-handoff-ms")
		b.ReportMetric(float64(hands[len(hands)*99/100].Microseconds())/1000, "p99-handoff-ms")
		var sum time.Duration
		for _, h := range hands {
			sum += h
		}
		b.ReportMetric(float64((sum/time.Duration(len(hands))).Microseconds())/1000, "mean-handoff-ms")
	}
}

// BenchmarkContention compares etcdlock with the stock concurrency.Mutex
// (one Session per goroutine, so they really exclude each other) on the
// same embedded etcd, in one run.
func BenchmarkContention(b *testing.B) {
	e := testenv.NewEtcd(b)
	b.Run("etcdlock", func(b *testing.B) {
		l := newLocker(b, e.Client(b))
		contend(b, func(b *testing.B) func(ctx context.Context) (func(), error) {
			return func(ctx context.Context) (func(), error) {
				lease, err := l.Acquire(ctx, "bench:contention")
				if err != nil {
					return nil, err
				}
				return func() { _ = lease.Release(context.Background()) }, nil
			}
		})
	})
	b.Run("concurrency.Mutex", func(b *testing.B) {
		c := e.Client(b)
		contend(b, func(b *testing.B) func(ctx context.Context) (func(), error) {
			s, err := concurrency.NewSession(c)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			m := concurrency.NewMutex(s, "bench:mutex")
			return func(ctx context.Context) (func(), error) {
				if err := m.Lock(ctx); err != nil {
					return nil, err
				}
				return func() { _ = m.Unlock(context.Background()) }, nil
			}
		})
	})
}

// BenchmarkUncontended is one acquire+release of a free key.
func BenchmarkUncontended(b *testing.B) {
	e := testenv.NewEtcd(b)
	b.Run("etcdlock", func(b *testing.B) {
		l := newLocker(b, e.Client(b))
		ctx := context.Background()
		for b.Loop() {
			lease, err := l.Acquire(ctx, "bench:uncontended")
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("concurrency.Mutex", func(b *testing.B) {
		s, err := concurrency.NewSession(e.Client(b))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		m := concurrency.NewMutex(s, "bench:uncontended-mutex")
		ctx := context.Background()
		for b.Loop() {
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHandoffFloor is the least a handoff through etcd costs, with no
// lock around it: a client deletes a key and a synced watch in the same
// process sees the deletion. etcdlock's contended handoff in a short queue
// is exactly these two steps (the holder's owner-checked delete, the
// waiter's queue watch); a longer queue adds a read ("+read"). "hot" runs
// them back to back; "cold" first idles 1 ms, as a contended lock does
// while it is held, so that the figures include waking an idle machine
// (on a shared VM that is most of the cost). Compare etcdlock's handoff
// figures in BenchmarkContention with "cold", measured in the same run.
func BenchmarkHandoffFloor(b *testing.B) {
	for _, bc := range []struct {
		name       string
		idle, read bool
	}{{"hot", false, false}, {"cold", true, false}, {"cold+read", true, true}} {
		b.Run(bc.name, func(b *testing.B) {
			c := testenv.NewEtcd(b).Client(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const key = "bench:floor"
			wch := c.Watch(clientv3.WithRequireLeader(ctx), key, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
			if wr := <-wch; !wr.Created {
				b.Fatalf("watch not created: %v", wr.Err())
			}
			var lat []time.Duration
			for b.Loop() {
				if _, err := c.Put(ctx, key, "x"); err != nil {
					b.Fatal(err)
				}
				if bc.idle {
					time.Sleep(holdFor)
				}
				t0 := time.Now()
				if _, err := c.Delete(ctx, key); err != nil {
					b.Fatal(err)
				}
				if wr, ok := <-wch; !ok || len(wr.Events) == 0 {
					b.Fatalf("watch ended: %v", wr.Err())
				}
				if bc.read {
					if _, err := c.Get(ctx, key, clientv3.WithKeysOnly()); err != nil {
						b.Fatal(err)
					}
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			var sum time.Duration
			for _, d := range lat {
				sum += d
			}
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-handoff-ms")
			b.ReportMetric(float64((sum/time.Duration(len(lat))).Microseconds())/1000, "mean-handoff-ms")
			b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "p90-handoff-ms")
		})
	}
}
