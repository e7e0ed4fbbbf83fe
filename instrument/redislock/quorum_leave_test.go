package redislock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// runsRelease reports whether cmd is an EVALSHA of release.lua.
func runsRelease(cmd redis.Cmder) bool {
	a := cmd.Args()
	return cmd.Name() == "evalsha" && len(a) > 1 && a[1] == redislock.ReleaseSHA
}

// releaseAnswer is how a node answers release.lua calls: Redis answers
// them with the error reply reply (a script that calls redis.error_reply
// runs instead), or, with closeClient, the client is closed before the call
// is sent; times bounds how many calls fail so (0: every one). The zero
// value leaves them alone.
type releaseAnswer struct {
	reply       string
	closeClient bool
	times       int32
}

// final says whether the answer is a release failing for good.
func (a releaseAnswer) final() bool {
	return a.closeClient || a.reply != "" && a.times == 0
}

// answerReleases makes release.lua calls through client c fail without
// running, from arm on, as its releaseAnswer says; tries counts the calls
// since arm.
type answerReleases struct {
	passThrough
	releaseAnswer
	c     *redis.Client
	armed atomic.Bool
	tries atomic.Int32
}

func (h *answerReleases) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.armed.Load() || !runsRelease(cmd) {
			return next(ctx, cmd)
		}
		if n := h.tries.Add(1); h.times > 0 && n > h.times {
			return next(ctx, cmd)
		}
		if h.closeClient {
			_ = h.c.Close()
			return next(ctx, cmd)
		}
		answer := redis.NewCmd(ctx, "eval", "return redis.error_reply(ARGV[1])", 0, h.reply)
		// The release gets answer's error reply (Client.Process sets it on
		// cmd) as if Redis had answered the release so.
		return next(ctx, answer)
	}
}

// cutBeforeRelease blackholes p right before the first release.lua call
// through a client once armed, and counts the release calls that failed.
type cutBeforeRelease struct {
	passThrough
	p      *testenv.Proxy
	armed  atomic.Bool
	failed atomic.Int32
}

func (h *cutBeforeRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !runsRelease(cmd) {
			return next(ctx, cmd)
		}
		if h.armed.CompareAndSwap(true, false) {
			h.p.Blackhole(true)
		}
		err := next(ctx, cmd)
		if err != nil {
			h.failed.Add(1)
		}
		return err
	}
}

// TestQuorum_ALeaveRefusedOnOneNodeStillGivesBackTheGrantOnAnother: the
// three nodes grant an attempt whose replies are lost, so the Acquire that
// gives up leaves on all three in the background. On node 1 the leave's
// release may fail for good (Redis refuses it with an error reply, or node
// 1's client is closed): trying it again would not change that. Node 0 is
// unreachable when the leave first tries it (its try times out), and
// reachable afterwards; node 2 may answer the first try that it is loading
// its data set (a transient reply). Neither node 1's final error nor the
// way the nodes' errors read together may end the leave's retries on node
// 0 (or node 2): the grant there, under a token nobody holds, would
// otherwise stand for its whole TTL (an hour here). Node 1 is done with
// after a final error (not tried again), and the leave ends once the
// others have answered.
func TestQuorum_ALeaveRefusedOnOneNodeStillGivesBackTheGrantOnAnother(t *testing.T) {
	t.Parallel()
	const refused, loading = "ERR release refused by the test", "LOADING Redis is loading the dataset in memory"
	for _, tc := range []struct {
		name  string
		node1 releaseAnswer // how node 1 answers the leave's releases
		node2 releaseAnswer // how node 2 answers them
	}{
		{name: "error-reply", node1: releaseAnswer{reply: refused}},
		{name: "closed-client", node1: releaseAnswer{closeClient: true}},
		{name: "error-reply-beside-loading", node1: releaseAnswer{reply: refused}, node2: releaseAnswer{reply: loading, times: 1}},
		{name: "loading", node2: releaseAnswer{reply: loading, times: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nodes := quorumNodes(t, 3)
			cs, proxies, clients := proxiedClients(t, nodes, 3)
			cut := &cutBeforeRelease{p: proxies[0]}
			clients[0].AddHook(cut)
			var answers []*answerReleases
			for i, a := range []releaseAnswer{tc.node1, tc.node2} {
				if a != (releaseAnswer{}) {
					h := &answerReleases{releaseAnswer: a, c: clients[i+1]}
					clients[i+1].AddHook(h)
					answers = append(answers, h)
				}
			}
			final := tc.node1.final()
			l, admins, ctx, ttl := warmQuorum(t, nodes, cs, 5*time.Second)

			const key = "lock:quorum-leave-refused"
			allDropped := dropNextReplies(t, proxies)
			cut.armed.Store(true)
			for _, h := range answers {
				h.armed.Store(true)
			}
			// Shorter than the clients' ReadTimeout (1 s): the attempt's
			// context ends before go-redis would resend it.
			actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			if lease, err := l.Acquire(actx, key, ttl, instrument.FailFast()); err == nil {
				t.Fatalf("Acquire returned a lease (fence %d) although every reply was lost", lease.Fence())
			} else if !errors.Is(err, instrument.ErrNotAcquired) {
				t.Fatalf("Acquire = %v, want ErrNotAcquired", err)
			}
			allDropped()
			if n := admins[0].Exists(ctx, key).Val(); n != 1 {
				t.Fatalf("node 0 holds %d locks on %q, want the lost attempt's grant (the test's premise)", n, key)
			}

			// The leave's first try: unanswered on node 0 (blackholed
			// right before it), answered as the case says on the others.
			waitFor(t, ctx, "the leave's first try on every node", func() bool {
				if cut.failed.Load() < 1 {
					return false
				}
				for _, h := range answers {
					if h.tries.Load() < 1 {
						return false
					}
				}
				return true
			})
			proxies[0].Blackhole(false)

			testenv.WaitFor(t, 30*time.Second, "the grants to be given back once node 0 answers", func() bool {
				for i, c := range admins {
					if i == 1 && final {
						continue // refused for good: stays for its TTL
					}
					if c.Exists(ctx, key).Val() != 0 {
						return false
					}
				}
				return true
			})
			testenv.WaitFor(t, 30*time.Second, "the leave to end once every node is done with", func() bool {
				return redislock.PendingLeaves(l) == 0
			})
			if final {
				if n := answers[0].tries.Load(); n != 1 {
					t.Errorf("node 1's release was tried %d times, want once: its refusal is final", n)
				}
			}
		})
	}
}
