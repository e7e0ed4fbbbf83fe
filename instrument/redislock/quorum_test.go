package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
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

func newQuorum(t testing.TB, nodes []*testenv.Redis, opts ...redislock.QuorumOption) *redislock.Locker {
	t.Helper()
	return newQuorumOn(t, quorumClients(t, nodes), opts...)
}

// newQuorumOn is a quorum Locker over clients cs (some through a proxy or
// with hooks), closed when the test ends.
func newQuorumOn(t testing.TB, cs []redis.UniversalClient, opts ...redislock.QuorumOption) *redislock.Locker {
	t.Helper()
	l, err := redislock.NewQuorum(cs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// proxiedClients returns clients of nodes for a quorum Locker: the first
// proxied of them reach their node through a proxy of their own, returned
// with those clients (to cut a node off, drop a reply, add a hook), and the
// others reach theirs directly.
func proxiedClients(t *testing.T, nodes []*testenv.Redis, proxied int) (cs []redis.UniversalClient, proxies []*testenv.Proxy, clients []*redis.Client) {
	t.Helper()
	cs = make([]redis.UniversalClient, len(nodes))
	for i, r := range nodes {
		if i >= proxied {
			cs[i] = newClient(t, r.Addr())
			continue
		}
		p := testenv.NewProxy(t, r.Addr())
		c := newClient(t, p.Addr())
		proxies = append(proxies, p)
		clients = append(clients, c)
		cs[i] = c
	}
	return cs, proxies, clients
}

// warmQuorum returns a quorum Locker on cs (hooks added to them already)
// with a node timeout of nodeTimeout, clients of nodes that reach them
// directly (admins), a minute's context and an hour's TTL; the Locker is
// warmed up (warmUp, FailFast) under that TTL.
func warmQuorum(t *testing.T, nodes []*testenv.Redis, cs []redis.UniversalClient, nodeTimeout time.Duration) (l *redislock.Locker, admins []redis.UniversalClient, ctx context.Context, ttl instrument.AcquireOption) {
	t.Helper()
	l = newQuorumOn(t, cs, redislock.WithNodeTimeout(nodeTimeout))
	admins = quorumClients(t, nodes)
	ctx = timeout(t, time.Minute)
	ttl = instrument.WithTTL(time.Hour)
	warmUp(t, ctx, l, ttl, instrument.FailFast())
	return l, admins, ctx, ttl
}

// dropNextReplies has each of proxies (proxies[i] in front of node i) drop
// the next reply through it, and returns a check that fails the test unless
// every one was dropped.
func dropNextReplies(t *testing.T, proxies []*testenv.Proxy) (allDropped func()) {
	var dropped []<-chan struct{}
	for _, p := range proxies {
		dropped = append(dropped, p.DropNextReply())
	}
	return func() {
		t.Helper()
		for i, d := range dropped {
			select {
			case <-d:
			default:
				t.Fatalf("node %d's reply was not dropped", i)
			}
		}
	}
}

func TestConformance_Quorum(t *testing.T) {
	// locktest.Run checks goroutines against a goleak.IgnoreCurrent snapshot:
	// nothing else may run in its process.
	if inOwnProcess(t) {
		return
	}
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
				// The default node timeout for the 300ms expiry TTL is 50ms,
				// which a loaded CI box's scheduler alone can exceed on every
				// node at once; Acquire then fails at once by design (fewer
				// than a majority answered). The suite is not about node
				// timeouts.
				func(t *testing.T) instrument.Locker {
					return newQuorum(t, nodes, redislock.WithNodeTimeout(time.Second))
				},
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

// TestQuorum_TooFewNodesAnsweringIsAStoreFailureUnlessAnAnswerSaysOtherwise:
// an attempt that fewer than a majority of nodes answered decides nothing.
// When every other node was out of reach (killed: a refused connection;
// blackholed: the node's own timeout) the store is out of reach, as a
// single Redis that cannot be reached is: a transport failure that
// storefail.Unavailable recognises (Govern's FailOpen falls back on it), not
// ErrNotAcquired, returned before the caller's deadline. A node that says
// another owner holds the lock changes nothing while too few answered to
// know of a majority; a majority that says so is ErrNotAcquired. An error
// reply (OOM) is the store's answer: an error, neither ErrNotAcquired nor a
// transport failure. A caller whose own deadline ends first gets
// ErrNotAcquired with it.
func TestQuorum_TooFewNodesAnsweringIsAStoreFailureUnlessAnAnswerSaysOtherwise(t *testing.T) {
	t.Parallel()
	type want int
	const (
		unreachable want = iota // a transport failure, not ErrNotAcquired
		notAcquired             // ErrNotAcquired, not a transport failure
		answerError             // neither
		gaveUp                  // ErrNotAcquired with the caller's DeadlineExceeded
	)
	for _, tc := range []struct {
		name      string
		killed    []int
		blackhole []int
		held      []int // another owner holds the key there
		oom       []int // out of memory: every write refused
		// readTimeout: the blackholed nodes' clients time out reads
		// before the node timeout ends their calls.
		readTimeout bool
		deadline    time.Duration
		want        want
		says        string // in the error
	}{
		{name: "all-killed", killed: []int{0, 1, 2}, want: unreachable, says: "0 of 3 nodes answered, 2 needed"},
		{name: "two-killed", killed: []int{0, 1}, want: unreachable, says: "1 of 3 nodes answered, 2 needed"},
		// The node timeout ends the blackholed nodes' calls; with the
		// client's read timeout shorter, its "i/o timeout" does.
		{name: "two-blackholed", blackhole: []int{0, 1}, want: unreachable, says: "no answer within the node timeout"},
		{name: "two-blackholed-read-timeout", blackhole: []int{0, 1}, readTimeout: true, want: unreachable, says: "i/o timeout"},
		{name: "killed-and-blackholed", killed: []int{0}, blackhole: []int{1}, want: unreachable, says: "1 of 3 nodes answered"},
		{name: "one-held-two-killed", killed: []int{0, 1}, held: []int{2}, want: unreachable, says: "1 of 3 nodes answered"},
		{name: "two-held-one-killed", killed: []int{0}, held: []int{1, 2}, want: notAcquired},
		{name: "two-out-of-memory", oom: []int{0, 1}, want: answerError, says: "OOM"},
		// The nodes out of reach leave a majority that could have
		// answered: an OOM reply kept it from answering.
		{name: "out-of-memory-and-killed", oom: []int{0}, killed: []int{1}, want: answerError, says: "OOM"},
		// Too many out of reach for a majority, whatever node 0 says.
		{name: "out-of-memory-and-two-killed", oom: []int{0}, killed: []int{1, 2}, want: unreachable, says: "OOM"},
		{name: "callers-deadline", blackhole: []int{0, 1, 2}, deadline: 300 * time.Millisecond, want: gaveUp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nodes := quorumNodes(t, 3)
			admins := quorumClients(t, nodes)
			cs := quorumClients(t, nodes)
			var proxies []*testenv.Proxy
			for _, i := range tc.blackhole {
				p := testenv.NewProxy(t, nodes[i].Addr())
				proxies = append(proxies, p)
				c := newClient(t, p.Addr())
				if !tc.readTimeout {
					o := c.Options()
					o.ReadTimeout, o.WriteTimeout = time.Minute, time.Minute
					c = redis.NewClient(o)
					t.Cleanup(func() { _ = c.Close() })
				}
				cs[i] = c
			}
			// Longer than the caller's deadline of the last case, and than
			// a live node takes to answer on a loaded machine.
			l := newQuorumOn(t, cs, redislock.WithNodeTimeout(2*time.Second))
			ctx := timeout(t, time.Minute)
			const key = "lock:q"
			for _, i := range tc.held {
				if err := admins[i].Set(ctx, key, "someone-else 1 {}", time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range tc.oom {
				if err := admins[i].ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range tc.killed {
				if err := nodes[i].Kill(); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range proxies {
				p.Blackhole(true)
			}
			actx := ctx
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				actx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			lease, err := l.Acquire(actx, key, instrument.WithTTL(10*time.Second), instrument.FailFast())
			if err == nil {
				_ = lease.Release(ctx)
				t.Fatalf("acquired (fence %d) with too few nodes answering", lease.Fence())
			}
			isNotAcquired, isUnavailable := errors.Is(err, instrument.ErrNotAcquired), storefail.Unavailable(err)
			var ok bool
			switch tc.want {
			case unreachable:
				ok = !isNotAcquired && isUnavailable && actx.Err() == nil
			case notAcquired:
				ok = isNotAcquired && !isUnavailable
			case answerError:
				ok = !isNotAcquired && !isUnavailable
			case gaveUp:
				ok = isNotAcquired && !isUnavailable && errors.Is(err, context.DeadlineExceeded)
			}
			if !ok {
				t.Fatalf("err = %v\nErrNotAcquired %v, storefail.Unavailable %v, caller's context %v; want %s",
					err, isNotAcquired, isUnavailable, actx.Err(),
					map[want]string{unreachable: "a transport failure before the deadline, not ErrNotAcquired", notAcquired: "ErrNotAcquired",
						answerError: "an error, neither ErrNotAcquired nor a transport failure", gaveUp: "ErrNotAcquired with DeadlineExceeded"}[tc.want])
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
			// Nothing of this Acquire is left on a node that answered.
			for i, c := range admins {
				if slices.Contains(tc.killed, i) || slices.Contains(tc.blackhole, i) || slices.Contains(tc.held, i) {
					continue
				}
				testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("node %d to have no lock", i), func() bool {
					return c.Exists(ctx, key).Val() == 0
				})
			}
		})
	}
}

func TestNewQuorum_BadInput(t *testing.T) {
	t.Parallel()
	nodes := quorumNodes(t, 1)
	cs := quorumClients(t, nodes)
	for name, tc := range map[string]struct {
		nodes []redis.UniversalClient
		opts  []redislock.QuorumOption
		say   string
	}{
		"no nodes":     {nil, nil, "no nodes"},
		"nil node":     {[]redis.UniversalClient{cs[0], nil}, nil, "nil client at index 1"},
		"drift 0.5":    {cs, []redislock.QuorumOption{redislock.WithDriftFactor(0.5)}, "drift factor"},
		"drift < 0":    {cs, []redislock.QuorumOption{redislock.WithDriftFactor(-0.1)}, "drift factor"},
		"node timeout": {cs, []redislock.QuorumOption{redislock.WithNodeTimeout(-time.Second)}, "node timeout"},
		"retention 0":  {cs, []redislock.QuorumOption{redislock.WithFenceRetention(0)}, "fence retention"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := redislock.NewQuorum(tc.nodes, tc.opts...)
			if !errors.Is(err, instrument.ErrInvalidOption) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("err = %v, want ErrInvalidOption saying %q", err, tc.say)
			}
		})
	}
}

// TestQuorum_RetriedGrantLivesAsLongAsTheLeaseBelievesItValid: an attempt
// reaches node X but X's reply is lost, so the attempt fails; the next
// attempt of the same Acquire (same token) finds the token already on X.
// Acquire counts the lease valid for a TTL from that later attempt, so X must
// hold the key that long, not only a TTL from the earlier attempt: with X one
// of a bare majority, another client could otherwise win X and Z while A
// still believes its lease is valid.
func TestQuorum_RetriedGrantLivesAsLongAsTheLeaseBelievesItValid(t *testing.T) {
	t.Parallel()
	nodes := quorumNodes(t, 3)
	x := testenv.NewProxy(t, nodes[0].Addr())
	cs := quorumClients(t, nodes)
	cs[0] = newClient(t, x.Addr())
	// The node timeout ends X's call before the client's ReadTimeout (1s)
	// would make go-redis resend it, and is generous for a loaded machine.
	l, err := redislock.NewQuorum(cs, redislock.WithNodeTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	admins := quorumClients(t, nodes) // straight to the servers, not through x
	ctx := timeout(t, time.Minute)
	// Load the script and open a connection to every node, so that the
	// reply dropped below is the acquire's.
	warmUp(t, ctx, l, instrument.FailFast())

	const key, ttl = "lock:retried", 2 * time.Second
	// Another holder has Y and Z: the first attempt fails with X's grant
	// unseen, and no give-back is sent to X.
	for _, c := range admins[1:] {
		if err := c.Set(ctx, key, "someone-else 1 {}", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	dropped := x.DropNextReply()
	cfg, err := instrument.ApplyAcquireOptions(instrument.WithTTL(ttl), instrument.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	var retryAfter time.Time // the next attempt starts after this
	cfg.Observer = instrument.ObserverFuncs{OnAttempt: func(bool) {
		attempts++
		if attempts != 1 {
			return
		}
		select {
		case <-dropped:
		case <-ctx.Done():
			t.Error("the first attempt's reply from X was not dropped")
			return
		}
		// X holds A's token from the first attempt; let half its TTL pass,
		// then free Y for the next attempt.
		waitFor(t, ctx, "X's grant to age", func() bool {
			pttl := admins[0].PTTL(ctx, key).Val()
			return pttl > 0 && pttl < ttl/2
		})
		if err := admins[1].Del(ctx, key).Err(); err != nil {
			t.Error(err)
		}
		retryAfter = time.Now()
	}}
	a, err := l.Acquire(ctx, key, instrument.WithConfig(cfg))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer a.Release(ctx)
	if attempts < 2 {
		t.Fatalf("acquired in %d attempt(s): the scenario did not happen", attempts)
	}
	// A believes its lease valid until at least retryAfter + TTL - drift
	// (drift is 1% of the TTL + 2ms by default; TTL/10 is generous). Each
	// node that granted it must hold the key until then.
	believed := retryAfter.Add(ttl - ttl/10)
	for i, c := range admins[:2] {
		pttl, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// Read after the reply: the key expires no later than this.
		expires := time.Now().Add(pttl + time.Millisecond)
		if expires.Before(believed) {
			t.Errorf("node %d: A's key expires %v before the lease A was given ends (PTTL %v)", i, believed.Sub(expires).Round(time.Millisecond), pttl)
		}
	}
}

// TestQuorum_ReleaseAfterMajorityLostIsNotHeld: A's grant on one node ran
// later than on the others (under load its script ran ~10ms after the
// rest), so that node still has A's key when A's lease has ended and B holds
// the other two. A's Release must say ErrNotHeld — a majority denies A — and
// may delete only A's own leftover, never B's lock. (The state of that
// conformance failure, built directly: A's key on node 2 is made to
// outlive the others.)
func TestQuorum_ReleaseAfterMajorityLostIsNotHeld(t *testing.T) {
	t.Parallel()
	nodes := quorumNodes(t, 3)
	admins := quorumClients(t, nodes)
	// A node timeout no loaded machine reaches: every node's grant counts.
	la := newQuorum(t, nodes, redislock.WithNodeTimeout(10*time.Second))
	lb := newQuorum(t, nodes, redislock.WithNodeTimeout(10*time.Second))
	ctx := timeout(t, time.Minute)
	const key = "lock:late-grant"
	a, err := la.Acquire(ctx, key, instrument.WithTTL(300*time.Millisecond), instrument.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	aValue := admins[2].Get(ctx, key).Val()
	if aValue == "" {
		t.Fatal("node 2 has no grant for A")
	}
	if err := admins[2].PExpire(ctx, key, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	b, err := lb.Acquire(ctx, key, instrument.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	defer b.Release(ctx)
	select {
	case <-a.Context().Done():
	case <-ctx.Done():
		t.Fatal("A's lease did not end")
	}
	if err := a.Release(ctx); !errors.Is(err, instrument.ErrNotHeld) {
		t.Fatalf("A.Release with a majority held by B: %v, want ErrNotHeld", err)
	}
	if v := admins[2].Get(ctx, key).Val(); v == aValue {
		t.Error("A's leftover on node 2 was not deleted")
	}
	if err := b.Refresh(ctx); err != nil {
		t.Fatalf("B after A's release: %v", err)
	}
}
