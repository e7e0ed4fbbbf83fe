package idempotency_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/testenv"
)

// BenchmarkDo measures Store.Do on a private redis-server against the
// round trips of the snippet it replaces: SET NX PX a marker, run the
// effect, SET the result (two round trips, and unsafe: the marker is set
// before the effect succeeded, so a failed effect is never retried). Run
// the cases in one invocation and compare them as ratios (requests/s,
// cpu-µs/op for this process, redis-cpu-µs/op for the server).
//
// "first" is a new key per request: begin.lua, fn, finish.lua (two round
// trips, the result stored). "replay" is a key completed before the timer
// starts: one round trip that returns the stored result without running
// fn. One goroutine, and 16 goroutines (GOMAXPROCS x 8, as the lock
// benchmarks). The Store runs with metrics on a registry and the global
// (no-op) tracer provider; the stored result is 64 bytes.
func BenchmarkDo(b *testing.B) {
	c := testenv.NewRedis(b).Client(b)
	ctx := context.Background()
	s, err := idempotency.New(c, idempotency.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 64)
	fp := []byte("POST /v1/charges amount=100")
	var effects atomic.Int64
	fn := func(context.Context, idempotency.Attempt) ([]byte, error) {
		effects.Add(1)
		return body, nil
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var next atomic.Int64
	newKey := func() string { return "bench:" + run + ":" + strconv.FormatInt(next.Add(1), 10) }

	raw := func(key string) error {
		ok, err := c.SetNX(ctx, "marker:"+key, "1", time.Minute).Result()
		if err != nil || !ok {
			return err
		}
		effects.Add(1)
		return c.Set(ctx, "result:"+key, body, 24*time.Hour).Err()
	}
	first := func(key string) error {
		res, err := s.Do(ctx, key, fp, fn)
		if err == nil && res.Replayed {
			b.Errorf("a new key %q was replayed", key)
		}
		return err
	}
	replayed := "bench:" + run + ":replayed"
	if _, err := s.Do(ctx, replayed, fp, fn); err != nil {
		b.Fatal(err)
	}
	replay := func(string) error {
		res, err := s.Do(ctx, replayed, fp, fn)
		if err == nil && !res.Replayed {
			b.Errorf("the completed key ran fn again")
		}
		return err
	}

	cases := []struct {
		name     string
		parallel bool
		op       func(key string) error
		effect   bool // every op runs the effect once
	}{
		{name: "raw-setnx-set/1-goroutine", op: raw, effect: true},
		{name: "first/1-goroutine", op: first, effect: true},
		{name: "replay/1-goroutine", op: replay},
		{name: "raw-setnx-set/16-goroutines", parallel: true, op: raw, effect: true},
		{name: "first/16-goroutines", parallel: true, op: first, effect: true},
		{name: "replay/16-goroutines", parallel: true, op: replay},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			effects0 := effects.Load()
			testenv.BenchRedisOps(b, c, "requests/s", tc.parallel, func() func() error {
				return func() error { return tc.op(newKey()) }
			})
			want := int64(0)
			if tc.effect {
				want = int64(b.N)
			}
			if got := effects.Load() - effects0; got != want {
				b.Errorf("the effect ran %d times in %d requests, want %d", got, b.N, want)
			}
		})
	}
}
