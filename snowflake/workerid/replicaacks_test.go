package workerid_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// failoverTTL is the lease TTL of the failover tests with WithReplicaAcks, where nothing
// has to happen within the old holder's lease. The test of the default's hole needs B to
// claim and issue while A, whose last renewal reached only the primary, still issues: A
// does for at least two thirds of a TTL after the kill, so that test runs with twice this
// TTL, leaving B about four seconds (a kill, a REPLICAOF and one claim) on a loaded
// machine too.
const failoverTTL = 3 * time.Second

// failoverClient is a client whose connections go where point last sent them, as a
// Sentinel client's go to the primary it last found. Its ReadTimeout (1s) leaves room for
// a WAIT of up to 750ms.
func failoverClient(t *testing.T, addr string) (c *redis.Client, point func(addr string)) {
	var to atomic.Pointer[string]
	to.Store(&addr)
	c = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, *to.Load())
		}})
	t.Cleanup(func() { _ = c.Close() })
	return c, func(addr string) { to.Store(&addr) }
}

// laggingFailover plays the failover the package doc names: A holds WorkerID 6 and issues
// IDs; the replication link is cut; A goes on renewing on the primary alone until the
// slot has expired on the replica; the primary is killed and the replica promoted (a
// second replica, chained behind it, acknowledges writes there). B, pointed at the
// promoted replica at once, claims WorkerID 6 and issues; A, whose client finds the new
// primary only after its lease ran out on its side (Sentinel's discovery delay), issues
// until then. Both are built with opts. With flap, the replica is stopped and resumed at
// random (SIGSTOP/SIGCONT) and the link delays every chunk by 20ms while A renews three
// times; the link is then closed at once, with a renewal perhaps in flight and its chunks
// dropped. It returns how many IDs both A and B issued.
func laggingFailover(t *testing.T, ttl time.Duration, flap bool, opts ...workerid.Option) int {
	rp := testenv.NewReplicated(t)
	// A replica of the replica: still lagging with it while the link is cut, then the
	// replica that the promoted one's writes are acknowledged by.
	chained := testenv.NewRedis(t, testenv.WithRedisArgs("--replicaof", "127.0.0.1", strings.Split(rp.Replica.Addr(), ":")[1]))
	ctx := ctxT(t, time.Minute)
	cp, cr := testenv.NewRedisClient(t, rp.Primary.Addr()), testenv.NewRedisClient(t, rp.Replica.Addr())
	cc := testenv.NewRedisClient(t, chained.Addr())
	testenv.WaitFor(t, 30*time.Second, "the chained replica to sync", func() bool {
		info, err := cc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})

	ca, pointA := failoverClient(t, rp.Primary.Addr())
	cb, pointB := failoverClient(t, rp.Primary.Addr())
	registry := func(c *redis.Client, podIP string) *workerid.Registry {
		reg, err := workerid.NewRedis(c, append([]workerid.Option{workerid.WithTTL(ttl),
			workerid.WithIdentity("auth-6", podIP), workerid.WithoutHeartbeat()}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	regA, regB := registry(ca, "a"), registry(cb, "b")
	slot := workerid.SlotKey(workerid.DefaultKeyPrefix, 6)
	releasedASecondAgo(t, cp, 6)
	rp.CaughtUp(t) // a replica just synced may not acknowledge a write at once
	a := claim(t, regA, "auth")
	stop, stopIssuing := stopper(t)
	ia := issue(t, bound(t, a), stop)
	ia.issued(t, "A", a, 3*ttl)
	rp.CaughtUp(t) // the replica has A's claim

	if flap {
		rp.Link.SetLatency(20 * time.Millisecond)
		renewed := make(chan struct{})
		flapped := rp.FlapReplica(t, renewed)
		for range 3 {
			e := a.ExpiresAt()
			testenv.WaitFor(t, 5*ttl, "a renewal of A's lease while the replica flaps", func() bool { return a.ExpiresAt().After(e) })
		}
		close(renewed)
		<-flapped
	}
	if err := rp.Link.Close(); err != nil { // nothing A writes from now on reaches the replica
		t.Fatal(err)
	}
	// A renews on the primary alone until the slot has expired on the replica (which
	// answers reads of an expired key with nothing, deleting nothing).
	testenv.WaitFor(t, 3*ttl, "A's slot to expire on the lagging replica", func() bool {
		n, err := cr.Exists(ctx, slot).Result()
		return err == nil && n == 0
	})
	if err := rp.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	rp.Promote(t)
	pointB(rp.Replica.Addr())
	var b *workerid.Lease
	testenv.WaitFor(t, 3*ttl, "B's claim on the promoted replica", func() bool {
		l, err := regB.Claim(ctxT(t, ttl), "auth")
		switch {
		case err == nil:
			b = l
			return true
		case errors.Is(err, workerid.ErrCollision):
			return false
		case errors.Is(err, workerid.ErrNotReplicated):
			return false // the chained replica reconnects to the promoted one
		default:
			t.Fatalf("B's claim: %v", err)
			return false
		}
	})
	t.Cleanup(func() { _ = b.Release(context.Background()) })
	ib := issue(t, bound(t, b), stop)

	// A's generator stops at its lease's end on its side; only then does its client find
	// the new primary, where its renewal finds B's claim.
	select {
	case <-ia.done:
	case <-time.After(2 * ttl):
		t.Fatal("A's generator still issues two TTLs after the failover")
	}
	pointA(rp.Replica.Addr())
	select {
	case <-a.Done():
	case <-time.After(2 * ttl):
		t.Fatalf("A's lease did not end after B claimed its slot (lease error %v)", a.Err())
	}
	ib.issued(t, "B", b, 2*ttl)
	stopIssuing()
	<-ib.done
	dups := issuedByBoth(ia, ib)
	t.Logf("A issued %d IDs, stopped with %v, lease %v; B %d from floor %d: %d issued by both",
		len(ia.ids), ia.err, a.Err(), len(ib.ids), b.State().FloorUnixMilli, dups)
	if ia.err == nil || !errors.Is(ia.err, snowflake.ErrWorkerLeaseLost) {
		t.Errorf("A's generator stopped with %v, want ErrWorkerLeaseLost", ia.err)
	}
	if !errors.Is(a.Err(), workerid.ErrTakenOver) {
		t.Errorf("A's lease ended with %v, want ErrTakenOver", a.Err())
	}
	return dups
}

// TestFailover_DefaultIssuesDuplicateIDsAfterALaggingReplicaIsPromoted: the hole the
// package doc states (a mark that survives stale), on real servers (see laggingFailover).
// Without WithReplicaAcks, A's renewals that reached only the primary extended its lease
// and its reservation; the promoted replica has neither, B claims the slot above the
// stale mark, and both issue the same IDs for as long as A's lease runs on its side
// (measured: about 70,000 of them).
func TestFailover_DefaultIssuesDuplicateIDsAfterALaggingReplicaIsPromoted(t *testing.T) {
	t.Parallel()
	if laggingFailover(t, 2*failoverTTL, false) == 0 {
		t.Fatalf("no ID issued by both A and B: the default's renewals now wait for replicas?")
	}
}

// TestReplicaAcks_NoDuplicateIDsAfterALaggingReplicaIsPromoted: laggingFailover with
// WithReplicaAcks(1, ...): A's renewals after the cut are not acknowledged, so its lease
// and reservation stay those of the last one the replica has, and its generator stops
// before the slot can expire there. B's claim on the promoted replica starts above every
// ID A issued; also when the link is cut while the replica flaps, a renewal perhaps in
// flight.
func TestReplicaAcks_NoDuplicateIDsAfterALaggingReplicaIsPromoted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		flap bool
	}{{"cut while quiet", false}, {"cut mid-flight while the replica flaps", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if dups := laggingFailover(t, failoverTTL, tc.flap, workerid.WithReplicaAcks(1, ackTimeout)); dups != 0 {
				t.Fatalf("%d IDs issued by both A and B", dups)
			}
		})
	}
}

// ackTimeout is the WithReplicaAcks timeout of the tests with testTTL: at most TTL/3 less
// 250ms.
const ackTimeout = 300 * time.Millisecond

// ackedRegistry returns a Registry on the primary of rp, built WithReplicaAcks(1,
// ackTimeout), with the slot WorkerID 6's high-water mark set as a holder's that released
// it a second ago (so a claim need not wait out an unknown mark), and that mark.
func ackedRegistry(t *testing.T, rp *testenv.Replicated) (reg *workerid.Registry, cp *redis.Client, mark int64) {
	t.Helper()
	c, _ := failoverClient(t, rp.Primary.Addr())
	return ackedRegistryOn(t, rp, c, testTTL, ackTimeout)
}

// ackedRegistryOn is ackedRegistry on the client c of rp's primary, with lease TTL ttl and
// WithReplicaAcks(1, timeout).
func ackedRegistryOn(t *testing.T, rp *testenv.Replicated, c *redis.Client, ttl, timeout time.Duration) (reg *workerid.Registry, cp *redis.Client, mark int64) {
	t.Helper()
	reg, err := workerid.NewRedis(c, workerid.WithTTL(ttl), workerid.WithIdentity("auth-6", "a"),
		workerid.WithoutHeartbeat(), workerid.WithReplicaAcks(1, timeout))
	if err != nil {
		t.Fatal(err)
	}
	cp = testenv.NewRedisClient(t, rp.Primary.Addr())
	mark = releasedASecondAgo(t, cp, 6)
	// A replica just synced may not acknowledge a write at once: wait until it does.
	rp.CaughtUp(t)
	return reg, cp, mark
}

var slot6 = workerid.SlotKey(workerid.DefaultKeyPrefix, 6)

// TestReplicaAcks_AnUnacknowledgedClaimIsReleasedAndIsNotReplicated: with the only replica
// stopped, a Claim takes the slot on the primary, hears from WAIT that no replica has it,
// releases it (owner-checked, the mark put back where the claim found it) and returns
// *NotReplicatedError{0, 1, 300ms}. Once the replica is back, the same Registry claims the
// slot, from the same floor.
func TestReplicaAcks_AnUnacknowledgedClaimIsReleasedAndIsNotReplicated(t *testing.T) {
	t.Parallel()
	rp := testenv.NewReplicated(t)
	reg, cp, mark := ackedRegistry(t, rp)
	ctx := ctxT(t, time.Minute)
	resume := rp.PauseReplica(t)
	l, err := reg.Claim(ctxT(t, 5*time.Second), "auth")
	if err == nil {
		_ = l.Release(ctx)
		t.Fatal("Claim with the replica stopped succeeded, want NotReplicatedError")
	}
	var nr *workerid.NotReplicatedError
	if !errors.As(err, &nr) || !errors.Is(err, workerid.ErrNotReplicated) || nr.Acked != 0 || nr.Wanted != 1 || nr.Timeout != ackTimeout {
		t.Fatalf("Claim with the replica stopped: %v, want NotReplicatedError{0, 1, %v}", err, ackTimeout)
	}
	releasedThenClaimed(t, rp, reg, cp, mark, resume)
}

// releasedThenClaimed checks that a Claim that failed unacknowledged released slot 6 and
// put its mark back to mark, then resumes the replica and checks that reg claims the slot
// again from that floor.
func releasedThenClaimed(t *testing.T, rp *testenv.Replicated, reg *workerid.Registry, cp *redis.Client, mark int64, resume func()) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	if n, err := cp.Exists(ctx, slot6).Result(); err != nil || n != 0 {
		t.Fatalf("the unacknowledged claim's slot: exists %d, %v; want it released", n, err)
	}
	if got, err := cp.Get(ctx, slot6+":hw").Int64(); err != nil || got != mark {
		t.Fatalf("the mark after the unacknowledged claim: %d, %v; want it put back to %d", got, err, mark)
	}
	resume()
	rp.CaughtUp(t)
	if got := claim(t, reg, "auth").State().FloorUnixMilli; got != mark {
		t.Fatalf("the claim after the replica came back has floor %d, want %d", got, mark)
	}
}

// TestReplicaAcks_AnUnacknowledgedRenewalIsAFailedOne: A holds WorkerID 6 and issues; the
// only replica is stopped. A's renewals (or, with the slot deleted, its re-claim of the
// vanished slot) run on the primary, which raises the mark, but no replica acknowledges
// them: the lease keeps the deadline and reservation of the last acknowledged renewal, the
// generator stops at that deadline with ErrWorkerLeaseLost, no ID it issued is above that
// reservation, and the lease goes on retrying. Once the replica is back a renewal gets
// through and the generator issues again.
func TestReplicaAcks_AnUnacknowledgedRenewalIsAFailedOne(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		vanish bool // the slot deleted on the primary: the renewal re-claims it
	}{{"renewal", false}, {"re-claim of a vanished slot", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rp := testenv.NewReplicated(t)
			reg, cp, _ := ackedRegistry(t, rp)
			ctx := ctxT(t, time.Minute)
			a := claim(t, reg, "auth")
			g := bound(t, a)
			stop, stopIssuing := stopper(t)
			ia := issue(t, g, stop)
			ia.issued(t, "A", a, 3*testTTL)

			resume := rp.PauseReplica(t)
			h0, err := cp.Get(ctx, slot6+":hw").Int64()
			if err != nil {
				t.Fatal(err)
			}
			if tc.vanish {
				if err := cp.Del(ctx, slot6).Err(); err != nil {
					t.Fatal(err)
				}
			}
			// A renewal whose script ran after the replica stopped: no replica can
			// acknowledge it, and the renewals before it have been decided (one at a time).
			testenv.WaitFor(t, 3*testTTL, "a renewal on the primary while the replica is stopped", func() bool {
				if tc.vanish {
					n, err := cp.Exists(ctx, slot6).Result()
					return err == nil && n == 1
				}
				h, err := cp.Get(ctx, slot6+":hw").Int64()
				return err == nil && h > h0
			})
			acked, expires := a.State(), a.ExpiresAt()
			select {
			case <-ia.done:
			case <-time.After(3 * testTTL):
				t.Fatalf("A's generator still issues %v after the replica stopped", 3*testTTL)
			}
			if !errors.Is(ia.err, snowflake.ErrWorkerLeaseLost) {
				t.Fatalf("A's generator stopped with %v, want ErrWorkerLeaseLost", ia.err)
			}
			if err := a.Err(); err != nil {
				t.Fatalf("A's lease ended with %v; want it retrying", err)
			}
			if now := a.State(); !a.ExpiresAt().Equal(expires) || now.LimitUnixMilli != acked.LimitUnixMilli {
				t.Fatalf("an unacknowledged renewal moved the lease: expiry %v -> %v, reservation %d -> %d",
					expires, a.ExpiresAt(), acked.LimitUnixMilli, now.LimitUnixMilli)
			}
			if h, err := cp.Get(ctx, slot6+":hw").Int64(); err != nil || h <= acked.LimitUnixMilli {
				t.Fatalf("the primary's mark %d, %v: want it raised past the acknowledged %d by the unacknowledged renewals", h, err, acked.LimitUnixMilli)
			}
			ia.mu.Lock()
			for _, id := range ia.ids {
				if p, _ := snowflake.Decode(id); p.Time.UnixMilli() > acked.LimitUnixMilli {
					t.Errorf("ID %d issued at %d, above the acknowledged reservation %d", id, p.Time.UnixMilli(), acked.LimitUnixMilli)
					break
				}
			}
			ia.mu.Unlock()

			resume()
			rp.CaughtUp(t)
			testenv.WaitFor(t, 3*testTTL, "an acknowledged renewal after the replica came back", func() bool {
				return a.ExpiresAt().After(expires)
			})
			ib := issue(t, g, stop)
			ib.issued(t, "A, the replica back,", a, 3*testTTL)
			stopIssuing()
		})
	}
}

// commands records what a client sends, alone and in pipelines, each command as its name,
// the script it runs (by file name) and its keys, with the count of its other arguments:
// the values (times, the token) differ from run to run, the shape of the traffic does not.
type commands struct {
	scripts map[string]string // SHA: file name
	mu      sync.Mutex
	sent    []string
	piped   []string
}

func (h *commands) describe(cmd redis.Cmder) string {
	args := cmd.Args()
	if cmd.Name() != "evalsha" || len(args) < 3 {
		return strings.TrimSpace(fmt.Sprintln(args...))
	}
	name, ok := h.scripts[fmt.Sprint(args[1])]
	if !ok {
		name = "?"
	}
	nkeys, _ := args[2].(int)
	keys := make([]string, 0, nkeys)
	for _, k := range args[3 : 3+nkeys] {
		keys = append(keys, strings.TrimPrefix(fmt.Sprint(k), workerid.DefaultKeyPrefix))
	}
	return fmt.Sprintf("evalsha %s %s +%d", name, strings.Join(keys, ","), len(args)-3-nkeys)
}

// add appends d to *to unless it repeats the last entry: the renewals' count varies.
func (h *commands) add(to *[]string, d string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(*to); n == 0 || (*to)[n-1] != d {
		*to = append(*to, d)
	}
}

func (h *commands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(&h.sent, h.describe(cmd))
		return next(ctx, cmd)
	}
}

func (h *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		d := make([]string, len(cmds))
		for i, c := range cmds {
			d[i] = h.describe(c)
		}
		h.add(&h.piped, strings.Join(d, "; "))
		return next(ctx, cmds)
	}
}

// TestReplicaAcks_DefaultSendsWhatItSentBefore: without WithReplicaAcks, a claim, its
// renewals and its release each send one EVALSHA, alone, with the keys and argument count
// of before the option (this test passes unchanged on the commit before it): no pipeline,
// no WAIT, no touch. With it (the control: the hook sees pipelines), the claim and the
// renewals are each one pipeline of the script, the touch of the mark and WAIT; the release
// is sent alone.
func TestReplicaAcks_DefaultSendsWhatItSentBefore(t *testing.T) {
	t.Parallel()
	rp := testenv.NewReplicated(t)
	rp.CaughtUp(t)
	scripts := map[string]string{}
	for f, sha := range loadScripts(t, testenv.NewRedisClient(t, rp.Primary.Addr())) {
		scripts[sha] = f
	}
	touch, err := os.ReadFile("../../internal/replicaack/touch.lua")
	if err != nil {
		t.Fatal(err)
	}
	scripts[testenv.ScriptSHA(string(touch))] = "touch.lua"
	const (
		claimed  = "evalsha claim.lua {6},{6}:hw,{6}:space +7"
		renewed  = "evalsha renew.lua {6},{6}:hw,{6}:space +5"
		released = "evalsha release.lua {6},{6}:hw,{6}:space +4"
		touched  = "evalsha touch.lua {6}:hw +0"
		wait     = "wait 1 300"
	)
	for _, tc := range []struct {
		name  string
		opts  []workerid.Option
		sent  []string
		piped []string
	}{
		{"default", nil, []string{claimed, renewed, released}, nil},
		{"acks", []workerid.Option{workerid.WithReplicaAcks(1, ackTimeout)}, []string{released},
			[]string{claimed + "; " + touched + "; " + wait, renewed + "; " + touched + "; " + wait}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := failoverClient(t, rp.Primary.Addr())
			reg, err := workerid.NewRedis(c, append([]workerid.Option{workerid.WithTTL(testTTL),
				workerid.WithIdentity("auth-6", "a"), workerid.WithoutHeartbeat()}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			claimRenewRelease := func() {
				t.Helper()
				l := claim(t, reg, "auth")
				e0 := l.ExpiresAt()
				testenv.WaitFor(t, 2*testTTL, "a renewal", func() bool { return l.ExpiresAt().After(e0) })
				if err := l.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			// Run the scripts once first: the registry sends a script
			// it has not seen the server run with EVAL (replicaack.New).
			claimRenewRelease()
			h := &commands{scripts: scripts}
			c.AddHook(h)
			claimRenewRelease()
			h.mu.Lock()
			defer h.mu.Unlock()
			if !slices.Equal(h.sent, tc.sent) {
				t.Errorf("commands sent alone:\n%s\nwant\n%s", strings.Join(h.sent, "\n"), strings.Join(tc.sent, "\n"))
			}
			if !slices.Equal(h.piped, tc.piped) {
				t.Errorf("pipelines:\n%s\nwant\n%s", strings.Join(h.piped, "\n"), strings.Join(tc.piped, "\n"))
			}
		})
	}
}

// TestWithReplicaAcks_RefusesBadValuesClientsWithoutOneConnectionAndEtcd: each bad use of
// WithReplicaAcks is refused by the constructor with ErrInvalid and an error naming it.
func TestWithReplicaAcks_RefusesBadValuesClientsWithoutOneConnectionAndEtcd(t *testing.T) {
	t.Parallel()
	s := redisStore(t)
	c := redisClient(s.addr) // ReadTimeout 300ms
	t.Cleanup(func() { _ = c.Close() })
	long, _ := failoverClient(t, s.addr) // ReadTimeout 1s
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.addr}})
	t.Cleanup(func() { _ = cluster.Close() })
	nineSeconds := workerid.WithTTL(9 * time.Second) // renewals within 3s
	for _, tc := range []struct {
		name string
		c    redis.UniversalClient
		opts []workerid.Option
		want string
	}{
		{"no replica", long, []workerid.Option{workerid.WithReplicaAcks(0, ackTimeout)}, "WithReplicaAcks(0, 300ms): replica count 0 must be >= 1"},
		{"negative count", long, []workerid.Option{workerid.WithReplicaAcks(-1, ackTimeout)}, "replica count -1 must be >= 1"},
		{"zero timeout", long, []workerid.Option{workerid.WithReplicaAcks(1, 0)}, "WithReplicaAcks(1, 0s): timeout 0s must be > 0"},
		{"negative timeout", long, []workerid.Option{workerid.WithReplicaAcks(1, -time.Second)}, "timeout -1s must be > 0"},
		{"longer than a renewal", long, []workerid.Option{workerid.WithTTL(testTTL), workerid.WithReplicaAcks(1, 500*time.Millisecond)},
			"WithReplicaAcks(1, 500ms): timeout must be at most 416ms: a renewal ends within TTL/3 (667ms), less 250ms"},
		{"longer than the read timeout", c, []workerid.Option{nineSeconds, workerid.WithReplicaAcks(1, 100*time.Millisecond)},
			"NewRedis: WithReplicaAcks timeout 100ms must be at most 50ms: the client's ReadTimeout 300ms less 250ms"},
		{"a cluster client", cluster, []workerid.Option{workerid.WithReplicaAcks(1, ackTimeout)},
			"NewRedis: WithReplicaAcks needs a *redis.Client (one node, or Sentinel through NewFailoverClient), not *redis.ClusterClient"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := workerid.NewRedis(tc.c, tc.opts...)
			if !errors.Is(err, workerid.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewRedis: %v, want ErrInvalid with %q", err, tc.want)
			}
		})
	}
	t.Run("etcd", func(t *testing.T) {
		_, err := workerid.NewEtcd(testenv.NewEtcd(t).Client(t), workerid.WithReplicaAcks(1, ackTimeout))
		if !errors.Is(err, workerid.ErrInvalid) || !strings.Contains(err.Error(), "WithReplicaAcks is for Redis") {
			t.Fatalf("NewEtcd: %v, want ErrInvalid: WithReplicaAcks is for Redis", err)
		}
	})
	if _, err := workerid.NewRedis(long, workerid.WithTTL(testTTL), workerid.WithReplicaAcks(1, 416*time.Millisecond)); err != nil {
		t.Fatalf("NewRedis with the longest timeout TTL/3 allows: %v", err)
	}
}
