package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/locktest"
	"github.com/lockgov/lockgov/internal/testenv"
)

// quorumNodes starts n independent redis-servers.
func quorumNodes(t *testing.T, n int) []*testenv.Redis {
	t.Helper()
	nodes := make([]*testenv.Redis, n)
	for i := range nodes {
		nodes[i] = testenv.NewRedis(t)
	}
	return nodes
}

func quorumClients(t testing.TB, nodes []*testenv.Redis) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(nodes))
	for i, r := range nodes {
		cs[i] = newClient(t, r.Addr())
	}
	return cs
}

func newQuorum(t testing.TB, nodes []*testenv.Redis, opts ...redislock.Option) *redislock.Locker {
	t.Helper()
	l, err := redislock.NewQuorum(quorumClients(t, nodes), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestConformance_Quorum(t *testing.T) {
	for _, down := range []int{0, 1} {
		t.Run(map[int]string{0: "all-up", 1: "one-node-down"}[down], func(t *testing.T) {
			nodes := quorumNodes(t, 3)
			for i := range down {
				if err := nodes[i].Kill(); err != nil {
					t.Fatal(err)
				}
			}
			admins := quorumClients(t, nodes)
			locktest.Run(t,
				func(t *testing.T) instrument.Locker { return newQuorum(t, nodes) },
				locktest.WithExpiryTTL(300*time.Millisecond),
				// Quorum fences are documented as diagnostics: a later
				// holder's fence is larger only while the node that issued
				// the earlier one answers (see NewQuorum).
				locktest.WithoutFenceOrder(),
				locktest.WithLoser(func(t *testing.T, key string) {
					// A majority loses the key: the next renewal cannot be
					// confirmed by a majority.
					for _, c := range admins[down:] {
						ctx, cancel := context.WithTimeout(context.Background(), time.Second)
						c.Del(ctx, key)
						cancel()
					}
				}),
			)
		})
	}
}

func TestQuorum_TwoOfThreeDownIsNotAcquiredBeforeDeadline(t *testing.T) {
	nodes := quorumNodes(t, 3)
	l := newQuorum(t, nodes)
	for _, r := range nodes[:2] {
		if err := r.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := l.Acquire(ctx, "lock:q")
	if !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("err = %v, want ErrNotAcquired", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("returned only at the deadline: %v", err)
	}
	if !strings.Contains(err.Error(), "1 of 3 nodes answered, 2 needed") {
		t.Errorf("error %q does not say how many nodes answered", err)
	}
	// Nothing is left behind on the node that answered.
	c := newClient(t, nodes[2].Addr())
	if c.Exists(ctx, "lock:q").Val() != 0 {
		t.Fatal("the minority grant was not given back")
	}
}

func TestNewQuorum_BadInput(t *testing.T) {
	nodes := quorumNodes(t, 1)
	cs := quorumClients(t, nodes)
	for name, tc := range map[string]struct {
		nodes []redis.UniversalClient
		opts  []redislock.Option
		say   string
	}{
		"no nodes":     {nil, nil, "no nodes"},
		"nil node":     {[]redis.UniversalClient{cs[0], nil}, nil, "nil client at index 1"},
		"drift 0.5":    {cs, []redislock.Option{redislock.WithDriftFactor(0.5)}, "drift factor"},
		"drift < 0":    {cs, []redislock.Option{redislock.WithDriftFactor(-0.1)}, "drift factor"},
		"node timeout": {cs, []redislock.Option{redislock.WithNodeTimeout(-time.Second)}, "node timeout"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := redislock.NewQuorum(tc.nodes, tc.opts...)
			if !errors.Is(err, instrument.ErrInvalidOption) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("err = %v, want ErrInvalidOption saying %q", err, tc.say)
			}
		})
	}
}
