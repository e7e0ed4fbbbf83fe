package redislock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// releasesRan counts the release.lua calls through a client that got an
// answer: EVALSHA, or EVAL after a restart emptied the node's script cache
// (runsRelease matches only the first).
type releasesRan struct {
	passThrough
	n atomic.Int32
}

func (h *releasesRan) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		if err == nil && (runsRelease(cmd) || cmd.Name() == "eval" && len(a) > 1 && a[1] == redislock.ReleaseSrc) {
			h.n.Add(1)
		}
		return err
	}
}

// TestQuorum_GiveBackAfterANodeRestartLeavesTheNewHolderAlone (fault 5):
// A holds a quorum lock on three nodes and releases it while nodes 1 and 2
// are cut off from A: node 0 confirms the release (Release returns nil),
// or the Release is on an ended context (it fails, and node 0's grant is
// given back at once); A's grants on nodes 1 and 2, a majority, are to be
// given back in the background. Between the release and that give-back,
// node 1 restarts without persistence: A's grant there is gone, and B
// takes the lock on nodes 0 and 1 (node 2 still holds A's grant). When node
// 1 can be reached again, A's give-back must leave B's grant there alone
// (B keeps its majority: its lease live, its renewal and Release
// confirmed), and end, node 2 alone being a minority; once B is done
// another caller takes the lock.
func TestQuorum_GiveBackAfterANodeRestartLeavesTheNewHolderAlone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		ended bool
	}{{"release-confirmed-by-node-0", false}, {"release-on-an-ended-context", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nodes := quorumNodes(t, 3)
			p1, p2 := testenv.NewProxy(t, nodes[1].Addr()), testenv.NewProxy(t, nodes[2].Addr())
			c1 := newClient(t, p1.Addr())
			ran := &releasesRan{}
			c1.AddHook(ran)
			l := newQuorumOn(t, []redis.UniversalClient{newClient(t, nodes[0].Addr()), c1, newClient(t, p2.Addr())},
				redislock.WithNodeTimeout(time.Second))
			other := newQuorum(t, nodes, redislock.WithNodeTimeout(time.Second))
			admins := quorumClients(t, nodes)
			ctx := timeout(t, 2*time.Minute)
			hour := instrument.WithTTL(time.Hour)
			const key = "lock:quorum-give-back-after-a-restart"
			a, err := l.Acquire(ctx, key, hour, instrument.FailFast())
			if err != nil {
				t.Fatal(err)
			}

			p1.Blackhole(true)
			p2.Blackhole(true)
			if tc.ended {
				ended, cancel := context.WithCancel(ctx)
				cancel()
				if err := a.Release(ended); err == nil {
					t.Fatal("Release on an ended context = nil, want its error")
				}
			} else if err := a.Release(ctx); err != nil {
				t.Fatalf("a Release that node 0 confirmed = %v, want nil", err)
			}
			testenv.WaitFor(t, giveBackWithin, "A's grant on node 0 to be released", func() bool {
				return keyValue(t, ctx, admins[0], key) == ""
			})
			for i := 1; i <= 2; i++ {
				if keyValue(t, ctx, admins[i], key) == "" {
					t.Fatalf("node %d's grant is gone although A is cut off from it: the blackhole did not hold it", i)
				}
			}
			if redislock.PendingLeaves(l) == 0 {
				t.Fatal("no give-back pending although A's grants on nodes 1 and 2, a majority, stand")
			}

			if err := nodes[1].Restart(); err != nil {
				t.Fatal(err)
			}
			if v := keyValue(t, ctx, admins[1], key); v != "" {
				t.Fatal("node 1 kept A's grant across a restart without persistence: the test's premise failed")
			}
			b, err := other.Acquire(ctx, key, hour, instrument.FailFast())
			if err != nil {
				t.Fatalf("B cannot take the lock on nodes 0 and 1: %v", err)
			}
			want0, want1 := keyValue(t, ctx, admins[0], key), keyValue(t, ctx, admins[1], key)
			if want1 == "" {
				t.Fatal("B holds no grant on node 1: the test's premise failed")
			}

			before := ran.n.Load()
			p1.Blackhole(false) // node 2 stays cut off from A
			testenv.WaitFor(t, giveBackWithin, "A's give-back to run on node 1 and end (node 2 alone is a minority)", func() bool {
				return ran.n.Load() > before && redislock.PendingLeaves(l) == 0
			})
			untouched(t, ctx, admins[0], key, want0, b, "B")
			untouched(t, ctx, admins[1], key, want1, b, "B")
			if err := b.Refresh(ctx); err != nil {
				t.Fatalf("B's renewal after A's give-back: %v, want nil (a majority still B's)", err)
			}
			if err := b.Release(ctx); err != nil {
				t.Fatalf("B's Release: %v, want nil (its grants untouched)", err)
			}
			p2.Blackhole(false)
			givenBackToAMajority(t, ctx, l, other, admins, key)
		})
	}
}
