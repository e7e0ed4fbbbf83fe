package lockbench_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// backend makes a fresh Locker (with its own connections: a separate
// process, in effect) on one store.
type backend struct {
	name      string
	newLocker func(b *testing.B) instrument.Locker
	opts      []instrument.AcquireOption // the wait strategy, when not the default
}

func redisClient(b *testing.B, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func backends(b *testing.B) []backend {
	single := testenv.NewRedis(b)
	cluster := testenv.NewRedisCluster(b, 3)
	q := []*testenv.Redis{testenv.NewRedis(b), testenv.NewRedis(b), testenv.NewRedis(b)}
	etcd1 := testenv.NewEtcd(b)
	etcd3 := testenv.NewEtcdCluster(b, 3)
	return []backend{
		{"redis", func(b *testing.B) instrument.Locker {
			return must(redislock.New(redisClient(b, single.Addr())))
		}, nil},
		{"redis-retry", func(b *testing.B) instrument.Locker {
			return must(redislock.New(redisClient(b, single.Addr())))
		}, []instrument.AcquireOption{instrument.Retry(instrument.ExponentialBackoff(time.Millisecond, 50*time.Millisecond), 1<<20)}},
		{"redis-fair", func(b *testing.B) instrument.Locker {
			return must(redislock.New(redisClient(b, single.Addr()), redislock.Fair()))
		}, nil},
		{"redis-cluster-3", func(b *testing.B) instrument.Locker {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
			b.Cleanup(func() { _ = c.Close() })
			return must(redislock.New(c))
		}, nil},
		{"redis-quorum-3", func(b *testing.B) instrument.Locker {
			var nodes []redis.UniversalClient
			for _, r := range q {
				nodes = append(nodes, redisClient(b, r.Addr()))
			}
			return must(redislock.NewQuorum(nodes))
		}, nil},
		{"etcd", func(b *testing.B) instrument.Locker {
			return must(etcdlock.New(etcd1.Client(b)))
		}, nil},
		{"etcd-cluster-3", func(b *testing.B) instrument.Locker {
			return must(etcdlock.New(etcd3.Client(b)))
		}, nil},
	}
}

// BenchmarkBackends measures, per backend in one run: an uncontended
// acquire+release pair, and 8 contenders (each its own Locker) on one key
// holding it ~1 ms, reporting acquisitions/s, p50/p99 wait and max/min
// acquisitions per contender.
//
//	go test -run '^$' -bench . -benchtime 400x ./internal/lockbench/
func BenchmarkBackends(b *testing.B) {
	for _, be := range backends(b) {
		if be.opts == nil {
			b.Run(be.name+"/uncontended", func(b *testing.B) {
				l := be.newLocker(b)
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				key := "lock:bench:free:" + be.name
				for b.Loop() {
					lease, err := l.Acquire(ctx, key, instrument.FailFast(), instrument.WithTTL(10*time.Second))
					if err != nil {
						b.Fatal(err)
					}
					if err := lease.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run(be.name+"/contended-8x1ms", func(b *testing.B) {
			contend(b, be, 8, time.Millisecond)
		})
	}
}

func contend(b *testing.B, be backend, workers int, hold time.Duration) {
	lockers := make([]instrument.Locker, workers)
	for i := range lockers {
		lockers[i] = be.newLocker(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	key := fmt.Sprintf("lock:bench:contended:%s:%d", be.name, b.N)
	waits := make([][]time.Duration, workers)
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i := range workers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				t0 := time.Now()
				lease, err := lockers[i].Acquire(ctx, key, append([]instrument.AcquireOption{instrument.WithTTL(10 * time.Second)}, be.opts...)...)
				if err != nil {
					b.Error(err)
					return
				}
				waits[i] = append(waits[i], time.Since(t0))
				time.Sleep(hold)
				if err := lease.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(waits...)
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "acq/s")
	b.ReportMetric(float64(all[len(all)/2])/float64(time.Millisecond), "p50-wait-ms")
	b.ReportMetric(float64(all[len(all)*99/100])/float64(time.Millisecond), "p99-wait-ms")
	minN, maxN := len(all), 0
	for _, w := range waits {
		minN, maxN = min(minN, len(w)), max(maxN, len(w))
	}
	b.ReportMetric(float64(maxN)/float64(max(minN, 1)), "max/min-acq")
}
