package redislock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestRelease_OnAnEndedContextGivesTheLockUp: `defer lease.Release(reqCtx)`
// after the request was cancelled is a Release on an ended context, on
// which go-redis sends nothing. The watchdog stops with the lease, so the
// lock stood under a token nobody would use again for its whole TTL (an
// hour here): a waiter queued behind it waited the hour, every other caller
// was refused. Release must still say it failed (whether the lock was free
// in time is unknown), and give the lock up in the background: to the
// queued waiter, or by deleting it.
func TestRelease_OnAnEndedContextGivesTheLockUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		fair   bool
		waiter bool
	}{
		{"default", false, false},
		{"default/with-a-waiter", false, true},
		{"fair", true, false},
		{"fair/with-a-waiter", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, admin := setup(t)
			var opts []redislock.Option
			if tc.fair {
				opts = append(opts, redislock.Fair())
			}
			l := newLocker(t, newClient(t, r.Addr()), opts...)
			other := newLocker(t, newClient(t, r.Addr()), opts...)
			ctx := timeout(t, time.Minute)
			ttl := instrument.WithTTL(time.Hour)
			const key = "lock:release-on-an-ended-context"

			reqCtx, cancel := context.WithCancel(ctx)
			lease, err := l.Acquire(reqCtx, key, ttl)
			if err != nil {
				t.Fatal(err)
			}
			var got chan error
			if tc.waiter {
				got = make(chan error, 1)
				go func() {
					wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
					defer wcancel()
					w, err := other.Acquire(wctx, key, ttl)
					if err == nil {
						err = w.Release(ctx)
					}
					got <- err
				}()
				eventually(t, "the waiter to queue behind the holder", func() bool {
					return admin.LLen(ctx, queueKey(key)).Val() > 0
				})
			}

			cancel() // the request ends; its deferred Release runs
			if err := lease.Release(reqCtx); err == nil {
				t.Error("Release on an ended context = nil, want its error: whether the lock was free in time is unknown")
			}
			if tc.waiter {
				if err := <-got; err != nil {
					t.Fatalf("the waiter queued behind a lock released on an ended context: %v (want it handed the lock, not the lock's hour)", err)
				}
			}
			eventually(t, "the lock released on an ended context to be given up", func() bool {
				return admin.Exists(ctx, key).Val() == 0
			})
			taken, err := other.Acquire(ctx, key, ttl, instrument.FailFast())
			if err != nil {
				t.Fatalf("another caller cannot take the lock after it was given up: %v", err)
			}
			if err := taken.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRelease_ThatNeverReachesRedisGivesTheLockUpOnceItDoes: the release's
// script is lost on its way (Redis unreachable, a blackholed connection)
// and the caller's context ends before go-redis can resend it. The lock
// stood for its TTL; it must be given up once Redis can be reached again.
func TestRelease_ThatNeverReachesRedisGivesTheLockUpOnceItDoes(t *testing.T) {
	t.Parallel()
	r, admin := setup(t)
	p := testenv.NewProxy(t, r.Addr())
	l := newLocker(t, newClient(t, p.Addr()))
	ctx := timeout(t, time.Minute)
	const key = "lock:release-never-sent"
	lease, err := l.Acquire(ctx, key, instrument.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}

	p.Blackhole(true)
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := lease.Release(rctx); err == nil {
		t.Fatal("a Release that could not reach Redis returned nil")
	}
	if admin.Exists(ctx, key).Val() != 1 {
		t.Fatal("the lock is gone although its release could not reach Redis: the blackhole did not hold it")
	}
	p.Blackhole(false)
	eventually(t, "the lock whose release was lost to be given up once Redis is reachable", func() bool {
		return admin.Exists(ctx, key).Val() == 0
	})
}

// TestQuorum_ReleaseOnAnEndedContextGivesTheLockUpOnEveryNode: the same in
// quorum mode, where the lock is a grant on each node: the grants must be
// given back (on every node that answers the give-back before the nodes
// left are a minority), or a majority stays out of reach for the TTL.
func TestQuorum_ReleaseOnAnEndedContextGivesTheLockUpOnEveryNode(t *testing.T) {
	t.Parallel()
	nodes := quorumNodes(t, 3)
	l := newQuorum(t, nodes, redislock.WithNodeTimeout(time.Second))
	admins := quorumClients(t, nodes)
	ctx := timeout(t, time.Minute)
	const key = "lock:quorum-release-on-an-ended-context"

	releaseOnAnEndedContext(t, ctx, l, key, instrument.WithTTL(time.Hour))
	givenBackToAMajority(t, ctx, l, newQuorum(t, nodes, redislock.WithNodeTimeout(time.Second)), admins, key)
}

// releaseOnAnEndedContext acquires key through l (FailFast) under a
// request's context, ends that context and releases the lease on it:
// Release must return an error.
func releaseOnAnEndedContext(t *testing.T, ctx context.Context, l *redislock.Locker, key string, ttl instrument.AcquireOption) {
	t.Helper()
	reqCtx, cancel := context.WithCancel(ctx)
	lease, err := l.Acquire(reqCtx, key, ttl, instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := lease.Release(reqCtx); err == nil {
		t.Error("Release on an ended context = nil, want its error")
	}
}

// grantsGivenBack waits until none of the nodes admins reach (node i
// through admins[i]) holds a grant on key.
func grantsGivenBack(t *testing.T, ctx context.Context, admins []redis.UniversalClient, key string) {
	t.Helper()
	for i, c := range admins {
		eventually(t, fmt.Sprintf("node %d's grant to be given back", i), func() bool {
			return c.Exists(ctx, key).Val() == 0
		})
	}
}

// givenBackToAMajority waits for l's background give-backs to end and
// checks what a quorum Release promises once they have: the nodes still
// holding key under the released lease's token are too few to keep a
// majority from anyone (the rest of the lock expires at its TTL), and
// another caller takes the lock. A give-back ends as soon as the nodes it
// has not reached are a minority (quorum.leave: a node down for good keeps
// its grant to its TTL rather than draw a background try a second for the
// TTL), so which nodes a loaded machine's tries clear in time varies; that
// a majority is free does not. Asserting every node cleared failed under
// load (a node's try timing out once the other's had got through).
func givenBackToAMajority(t *testing.T, ctx context.Context, l, other *redislock.Locker, admins []redis.UniversalClient, key string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	waitFor(t, wctx, "the give-back to end", func() bool { return redislock.PendingLeaves(l) == 0 })
	held := 0
	for _, c := range admins {
		if c.Exists(ctx, key).Val() == 1 {
			held++
		}
	}
	if majority := len(admins)/2 + 1; held > len(admins)-majority {
		t.Fatalf("%d of %d nodes still hold the released lease's grant after its give-back ended: a majority kept from everyone for the TTL", held, len(admins))
	}
	taken, err := other.Acquire(ctx, key, instrument.WithTTL(time.Minute), instrument.FailFast())
	if err != nil {
		t.Fatalf("another caller cannot take the lock after the give-back: %v", err)
	}
	if err := taken.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestQuorum_ReleaseOnAnEndedContextWithANodeDownGivesBackAndEnds: one node
// of three is down for good, which a quorum lock tolerates. A Release on
// an ended context gives its grants back on the two live nodes, and must
// then stop: the dead node's grant, if any, expires at its TTL, as after a
// Release that some node confirmed. It kept trying the dead node for the
// lock's whole TTL (an hour here), a background try every second after
// every such Release, holding one of the Locker's few give-back slots.
func TestQuorum_ReleaseOnAnEndedContextWithANodeDownGivesBackAndEnds(t *testing.T) {
	t.Parallel()
	nodes := quorumNodes(t, 3)
	l := newQuorum(t, nodes, redislock.WithNodeTimeout(time.Second))
	other := newQuorum(t, nodes, redislock.WithNodeTimeout(time.Second))
	admins := quorumClients(t, nodes)
	ctx := timeout(t, time.Minute)
	ttl := instrument.WithTTL(time.Hour)
	const key = "lock:quorum-release-on-an-ended-context-node-down"
	if err := nodes[2].Kill(); err != nil {
		t.Fatal(err)
	}

	releaseOnAnEndedContext(t, ctx, l, key, ttl)
	grantsGivenBack(t, ctx, admins[:2], key)
	eventually(t, "the give-back to end once only the dead node is left", func() bool {
		return redislock.PendingLeaves(l) == 0
	})
	taken, err := other.Acquire(ctx, key, ttl, instrument.FailFast())
	if err != nil {
		t.Fatalf("another caller cannot take the lock after it was given back: %v", err)
	}
	if err := taken.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestQuorum_ReleaseThatNoNodeConfirmedGivesBackAlthoughANodesClientIsClosed:
// each node's error is judged alone. The release reached no node: two are
// cut off (their outcome unknown), the third's client is closed (nothing
// was sent there, and nothing can be). The two cut-off nodes' grants must
// be given back once they can be reached: the closed client's ErrClosed,
// read in the join of every node's error, said "nothing was sent" for all
// of them, and their grants stood for the TTL, a majority out of reach.
func TestQuorum_ReleaseThatNoNodeConfirmedGivesBackAlthoughANodesClientIsClosed(t *testing.T) {
	t.Parallel()
	nodes := quorumNodes(t, 3)
	p0, p1 := testenv.NewProxy(t, nodes[0].Addr()), testenv.NewProxy(t, nodes[1].Addr())
	c2 := newClient(t, nodes[2].Addr())
	l := newQuorumOn(t, []redis.UniversalClient{newClient(t, p0.Addr()), newClient(t, p1.Addr()), c2},
		redislock.WithNodeTimeout(300*time.Millisecond))
	admins := quorumClients(t, nodes)
	ctx := timeout(t, time.Minute)
	const key = "lock:quorum-release-closed-client"
	lease, err := l.Acquire(ctx, key, instrument.WithTTL(time.Hour), instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}

	p0.Blackhole(true)
	p1.Blackhole(true)
	_ = c2.Close()
	if err := lease.Release(ctx); err == nil {
		t.Fatal("a Release that reached no node returned nil")
	}
	for i, c := range admins[:2] {
		if c.Exists(ctx, key).Val() != 1 {
			t.Fatalf("node %d's grant is gone although its release was cut off: the blackhole did not hold it", i)
		}
	}
	// Node 0 comes back first and its grant is given back while node 1 is
	// still cut off: node 1's grant and node 2's (which nothing can reach
	// through a closed client) are still a majority, so the give-back must
	// go on until node 1 answers. It stopped there: it counted only the
	// nodes it could still try.
	p0.Blackhole(false)
	waitFor(t, ctx, "node 0's grant to be given back", func() bool { return admins[0].Exists(ctx, key).Val() == 0 })
	p1.Blackhole(false)
	givenBackToAMajority(t, ctx, l, newQuorum(t, nodes, redislock.WithNodeTimeout(time.Second)), admins, key)
}

// TestQuorum_ReleaseThatOneNodeConfirmedGivesBackOnACutOffMajority: one
// node confirms the release, so Release returns nil ("released"), but the
// other two were cut off while it ran: they still hold this token's grant,
// a majority, and nobody else can take the lock until its TTL (an hour
// here). Their grants must be given back once they can be reached.
func TestQuorum_ReleaseThatOneNodeConfirmedGivesBackOnACutOffMajority(t *testing.T) {
	t.Parallel()
	nodes := quorumNodes(t, 3)
	p1, p2 := testenv.NewProxy(t, nodes[1].Addr()), testenv.NewProxy(t, nodes[2].Addr())
	l := newQuorumOn(t, []redis.UniversalClient{newClient(t, nodes[0].Addr()), newClient(t, p1.Addr()), newClient(t, p2.Addr())},
		redislock.WithNodeTimeout(300*time.Millisecond))
	other := newQuorum(t, nodes, redislock.WithNodeTimeout(time.Second))
	admins := quorumClients(t, nodes)
	ctx := timeout(t, time.Minute)
	ttl := instrument.WithTTL(time.Hour)
	const key = "lock:quorum-release-majority-cut-off"
	lease, err := l.Acquire(ctx, key, ttl, instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}

	p1.Blackhole(true)
	p2.Blackhole(true)
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("a Release that node 0 confirmed = %v, want nil", err)
	}
	for i, c := range admins[1:] {
		if c.Exists(ctx, key).Val() != 1 {
			t.Fatalf("node %d's grant is gone although its release was cut off: the blackhole did not hold it", i+1)
		}
	}
	p1.Blackhole(false)
	p2.Blackhole(false)
	givenBackToAMajority(t, ctx, l, other, admins, key)
}
