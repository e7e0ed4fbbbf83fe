package main

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockgov/lockgov/internal/testenv"
)

// The handoff cases run their operations back to back on a plain
// redis-server, and each operation is one handoff by notification: one
// PUBLISH per operation (inside the release script, or the floor's), none
// lost to a waiter that took a free lock instead.
func TestHandoffs_EachOperationIsOneHandoff(t *testing.T) {
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	h, err := newHandoffs(c)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name  string
		op    func(context.Context, int) error
		first int // operations before the first handoff
	}{{"floor", h.floor, 0}, {"default wait", h.lockgov(0), 1}, {"fair", h.lockgov(1), 1}} {
		const n = 20
		before := publishes(t, c)
		for i := range n {
			if err := tc.op(ctx, i); err != nil {
				t.Fatalf("%s, operation %d: %v", tc.name, i, err)
			}
		}
		if got, want := publishes(t, c)-before, n-tc.first; got != want {
			t.Errorf("%s: %d PUBLISH in %d operations, want %d (one per handoff)", tc.name, got, n, want)
		}
	}
}

var publishCalls = regexp.MustCompile(`cmdstat_publish:calls=(\d+)`)

func publishes(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := publishCalls.FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
