package quota_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/testenv"
)

// BenchmarkDeduct measures one deduction on a private redis-server, against
// the floor a hand-written counter would cost: a bare DECRBY (one round
// trip, no balance check, no request record, so neither safe against
// overselling nor against a retried request). Run the cases in one
// invocation and compare them as ratios (deductions/s, cpu-µs/op for this
// process, redis-cpu-µs/op for the server): on a machine where client and
// server share the cores, throughput follows the sum of the two.
//
// Cases: one goroutine; 16 goroutines (GOMAXPROCS x 8, as the lock
// benchmarks) on distinct keys; 16 goroutines on one hot key, unsharded and
// WithShards(8). Quota runs with metrics on a registry and the global
// (no-op) tracer provider.
func BenchmarkDeduct(b *testing.B) {
	c := testenv.NewRedis(b).Client(b)
	ctx := context.Background()
	const stock = 1 << 40
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var next atomic.Int64
	reqID := func() string { return run + "-" + strconv.FormatInt(next.Add(1), 10) }

	newQ := func(b *testing.B, opts ...quota.Option) *quota.Quota {
		q, err := quota.New(c, append([]quota.Option{quota.WithRegisterer(prometheus.NewRegistry())}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		return q
	}
	deduct := func(q *quota.Quota, key string) error {
		_, err := q.Deduct(ctx, key, 1, reqID())
		return err
	}
	decrby := func(_ *quota.Quota, key string) error { return c.DecrBy(ctx, key, 1).Err() }

	cases := []struct {
		name     string
		parallel bool
		hot      bool
		opts     []quota.Option
		op       func(q *quota.Quota, key string) error
	}{
		{name: "raw-decrby/1-goroutine", op: decrby},
		{name: "deduct/1-goroutine", op: deduct},
		{name: "raw-decrby/16-goroutines", parallel: true, op: decrby},
		{name: "deduct/16-goroutines", parallel: true, op: deduct},
		{name: "deduct/16-goroutines-hot-key", parallel: true, hot: true, op: deduct},
		{name: "deduct/16-goroutines-hot-key-8-shards", parallel: true, hot: true, opts: []quota.Option{quota.WithShards(8)}, op: deduct},
	}
	for i, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			q := newQ(b, tc.opts...)
			prefix := "bench:" + strconv.Itoa(i) + ":"
			var keys atomic.Int64
			key := func() string {
				if tc.hot {
					return prefix + "hot"
				}
				return prefix + strconv.FormatInt(keys.Add(1), 10)
			}
			// Every key a goroutine may use is stocked before the timer
			// starts (distinct keys: one per goroutine, numbered from 1).
			stockKeys := 1
			if tc.parallel && !tc.hot {
				stockKeys = 8 * runtime.GOMAXPROCS(0) // the goroutines RunParallel starts
			}
			for k := 1; k <= stockKeys; k++ {
				name := prefix + strconv.Itoa(k)
				if tc.hot {
					name = prefix + "hot"
				}
				if err := stockKey(ctx, c, q, name, stock); err != nil {
					b.Fatal(err)
				}
			}
			testenv.BenchRedisOps(b, c, "deductions/s", tc.parallel, func() func() error {
				k := key()
				return func() error { return tc.op(q, k) }
			})
		})
	}
}

// stockKey gives key its stock the way each case reads it: Quota.Set for
// Deduct, a plain counter for DECRBY.
func stockKey(ctx context.Context, c *redis.Client, q *quota.Quota, key string, stock int64) error {
	if err := q.Set(ctx, key, stock); err != nil {
		return err
	}
	return c.Set(ctx, key, stock, 0).Err()
}
