package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// waitQueued returns once the sorted set waiters has a member, polling it
// every 100 µs for at most 10 s.
func waitQueued(b *testing.B, c *redis.Client, waiters string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		n, err := c.ZCard(ctx, waiters).Result()
		if err != nil {
			b.Fatalf("waiting for the waiter to queue: %v", err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatal("the waiter never queued")
		case <-time.After(100 * time.Microsecond):
		}
	}
}

// BenchmarkHandoff times one handoff with one holder and one waiter, each with a client of its
// own: from the holder calling Release to the waiter's Acquire returning with the lock. The
// floor case times the same path without lockgov: handoffFloor sent by one client, until a
// goroutine woken by another client's subscriber runs (the waiter's goroutine is woken by its
// Locker's pub/sub reader the same way). Before each handoff the holder sleeps, as a holder
// in the contention table does, so both processes are idle when it starts. Compare p50-µs
// between the cases of one run: the contention table's "idle per handoff" is this latency on
// the machine, plus the holder's next call competing for the cores.
//
//	cd bench && go test -run '^$' -bench Handoff -benchtime 400x .
func BenchmarkHandoff(b *testing.B) {
	r := testenv.NewRedis(b)
	e := &env{redisAddr: r.Addr()}
	ctx := context.Background()
	report := func(b *testing.B, ds []time.Duration) {
		slices.Sort(ds)
		at := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))]) / float64(time.Microsecond) }
		b.ReportMetric(at(0.5), "p50-µs")
		b.ReportMetric(at(0.9), "p90-µs")
		b.ReportMetric(at(0.99), "p99-µs")
		b.ReportMetric(0, "ns/op")
	}

	b.Run("floor-script-publish", func(b *testing.B) {
		pc, sc := newRedis(e), newRedis(e)
		defer func() { _ = pc.Close(); _ = sc.Close() }()
		ps := sc.Subscribe(ctx, "handoff:floor")
		defer func() { _ = ps.Close() }()
		if _, err := ps.Receive(ctx); err != nil {
			b.Fatal(err)
		}
		msgs := ps.Channel()
		keys := []string{"handoff:lock", "handoff:tomb", "handoff:queue", "handoff:fence"}
		ds := make([]time.Duration, 0, b.N)
		for b.Loop() {
			heard := make(chan time.Time, 1)
			go func() {
				<-msgs
				heard <- time.Now()
			}()
			time.Sleep(time.Millisecond)
			t0 := time.Now()
			if err := handoffFloor.Run(ctx, pc, keys, "handoff:floor", "next-holder", 10000, 1000).Err(); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, (<-heard).Sub(t0))
		}
		report(b, ds)
	})

	for _, mode := range []struct {
		name string
		opts []redislock.Option
	}{{"lockgov", nil}, {"lockgov-fair", []redislock.Option{redislock.Fair()}}} {
		b.Run(mode.name, func(b *testing.B) {
			ca, cb := newRedis(e), newRedis(e)
			defer func() { _ = ca.Close(); _ = cb.Close() }()
			holder, err := redislock.New(ca, mode.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = holder.Close() }()
			waiter, err := redislock.New(cb, mode.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = waiter.Close() }()
			key := "lock:handoff:" + mode.name
			keys, err := redislock.KeysFor(key)
			if err != nil {
				b.Fatal(err)
			}
			ttl := instrument.WithTTL(10 * time.Second)
			ds := make([]time.Duration, 0, b.N)
			for b.Loop() {
				h, err := holder.Acquire(ctx, key, ttl)
				if err != nil {
					b.Fatal(err)
				}
				type got struct {
					at  time.Time
					err error
				}
				done := make(chan got, 1)
				go func() {
					wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					l, err := waiter.Acquire(wctx, key, ttl)
					at := time.Now()
					if err == nil {
						err = l.Release(ctx)
					}
					done <- got{at, err}
				}()
				// Release only once the waiter has queued (its entry in the
				// key's Waiters set, both modes): a release before that would
				// time the waiter's own attempt, not a handoff.
				waitQueued(b, ca, keys.Waiters)
				time.Sleep(time.Millisecond) // the hold, as the floor's: both processes idle
				t0 := time.Now()
				if err := h.Release(ctx); err != nil {
					b.Fatal(err)
				}
				g := <-done
				if g.err != nil {
					b.Fatal(g.err)
				}
				ds = append(ds, g.at.Sub(t0))
			}
			report(b, ds)
		})
	}
}
