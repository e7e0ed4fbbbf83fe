package workerid_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// lostReplyRig is a Redis reached through a fault proxy, with WorkerID 4's high-water mark
// set and the claim and release scripts loaded, so that a dropped reply is a script's, not
// a NOSCRIPT's before it.
type lostReplyRig struct {
	ctx        context.Context
	p          *testenv.Proxy
	direct     *redis.Client // straight to Redis
	c          *redis.Client // through p, one connection already pooled
	releaseSHA string
}

const rigSlot = "lockgov:workerid:{4}"

func newLostReplyRig(t *testing.T, mark time.Time, timeout time.Duration) *lostReplyRig {
	t.Helper()
	r := testenv.NewRedis(t)
	g := &lostReplyRig{ctx: ctxT(t, timeout), p: testenv.NewProxy(t, r.Addr()), direct: redisClient(r.Addr())}
	t.Cleanup(func() { _ = g.direct.Close() })
	if err := g.direct.Set(g.ctx, rigSlot+":hw", mark.UnixMilli(), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"claim.lua", "release.lua"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.direct.ScriptLoad(g.ctx, string(src)).Err(); err != nil {
			t.Fatal(err)
		}
		g.releaseSHA = testenv.ScriptSHA(string(src))
	}
	g.c = redisClient(g.p.Addr())
	t.Cleanup(func() { _ = g.c.Close() })
	if err := g.c.Ping(g.ctx).Err(); err != nil { // a pooled connection: the next reply is the claim's
		t.Fatal(err)
	}
	return g
}

// registry is a Registry on the rig's proxied client, for WorkerID 4.
func (g *lostReplyRig) registry(t *testing.T) *workerid.Registry {
	t.Helper()
	reg, err := workerid.NewRedis(g.c, workerid.WithTTL(testTTL), workerid.WithIdentity("auth-4", ""), workerid.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// loseFirstRelease sends the first release of the rig's client into a black hole, and
// the network stays away until the test lets it back.
func (g *lostReplyRig) loseFirstRelease() *testenv.BeforeScript {
	h := &testenv.BeforeScript{SHA: g.releaseSHA, Do: func() { g.p.Blackhole(true) }}
	g.c.AddHook(h)
	return h
}

// nextClaimSucceeds lets the network back and claims again: the failed claim, whose
// release was lost, must not make this process collide with itself.
func (g *lostReplyRig) nextClaimSucceeds(t *testing.T, reg *workerid.Registry) {
	t.Helper()
	g.p.Blackhole(false)
	l, err := reg.Claim(g.ctx, "auth")
	if errors.Is(err, workerid.ErrCollision) {
		t.Fatalf("the next Claim collides with its own process's failed claim: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(g.ctx)
}

// TestClaim_FailedWithItsReplyLostLeavesTheSlotFree: the claim script ran but its reply
// never came, so Claim failed. The slot it took is held under a token nobody has; left
// alone, this process's next Claim would collide with itself for a TTL. The failed Claim
// releases it by its own token, and puts the high-water mark back to the floor the claim
// found: nothing was issued under it.
func TestClaim_FailedWithItsReplyLostLeavesTheSlotFree(t *testing.T) {
	t.Parallel()
	prevMark := time.Now().Add(-time.Second) // a previous holder released a second ago
	g := newLostReplyRig(t, prevMark, 10*time.Second)
	reg := g.registry(t)

	dropped := g.p.DropNextReply()
	if _, err := reg.Claim(g.ctx, "auth"); err == nil {
		t.Fatal("Claim succeeded although its reply was dropped")
	}
	select {
	case <-dropped:
	default:
		t.Fatal("no reply was dropped")
	}
	if n := g.direct.Exists(g.ctx, rigSlot).Val(); n != 0 {
		t.Fatalf("after a Claim that failed, the slot it took is still held: %q", g.direct.Get(g.ctx, rigSlot).Val())
	}
	if m, err := g.direct.Get(g.ctx, rigSlot+":hw").Int64(); err != nil || m != prevMark.UnixMilli() {
		t.Fatalf("high-water mark %d (%v) after the failed claim, want it back at the floor the claim found, %d", m, err, prevMark.UnixMilli())
	}
	g.nextClaimSucceeds(t, reg)
}

// TestClaim_NextClaimAbandonsAFailedClaimThatCouldNotBeReleased: the claim script ran, its
// reply was lost, and the release that follows it was lost too (the network went away
// meanwhile). The Registry keeps the failed claim, and the next Claim releases it first:
// it does not collide with its own process's earlier claim.
func TestClaim_NextClaimAbandonsAFailedClaimThatCouldNotBeReleased(t *testing.T) {
	t.Parallel()
	g := newLostReplyRig(t, time.Now().Add(-time.Second), 10*time.Second)
	lostRelease := g.loseFirstRelease()
	reg := g.registry(t)

	g.p.DropNextReply()
	if _, err := reg.Claim(g.ctx, "auth"); err == nil {
		t.Fatal("Claim succeeded although its reply was dropped")
	}
	if !lostRelease.Done() {
		t.Fatal("the failed claim sent no release")
	}
	if n := g.direct.Exists(g.ctx, rigSlot).Val(); n != 1 {
		t.Fatal("the failed claim's slot is free although its release was lost")
	}
	g.nextClaimSucceeds(t, reg)
}

// TestEtcdClaim_FailedAfterTheSlotCommittedLeavesTheSlotFree: the claim's transaction
// created the slot on its etcd lease, and then the claim's context ended before the
// high-water raise. The failed Claim revokes its grant, so the slot is free for this
// process's next Claim instead of held by an etcd lease nobody renews or revokes.
func TestEtcdClaim_FailedAfterTheSlotCommittedLeavesTheSlotFree(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t)
	// cancelAfterSlot, when set, ends the claim's context as soon as a transaction
	// succeeded: the slot's, the claim's first.
	var cancelAfterSlot atomic.Pointer[context.CancelFunc]
	cut := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if r, ok := reply.(*etcdserverpb.TxnResponse); ok && err == nil && r.Succeeded {
			if f := cancelAfterSlot.Swap(nil); f != nil {
				(*f)()
			}
		}
		return err
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   e.Endpoints(),
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(cut)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	reg, err := workerid.NewEtcd(c, workerid.WithTTL(testTTL), workerid.WithIdentity("auth-4", ""), workerid.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(ctxT(t, 10*time.Second))
	cancelAfterSlot.Store(&cancel)
	_, err = reg.Claim(ctx, "auth")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim cut after the slot's transaction: %v, want context.Canceled", err)
	}
	ctx = ctxT(t, 10*time.Second)
	get, err := c.Get(ctx, "lockgov:workerid:{4}")
	if err != nil {
		t.Fatal(err)
	}
	if len(get.Kvs) != 0 {
		t.Fatalf("after a Claim that failed, the slot it took is still held: %s", get.Kvs[0].Value)
	}
	l, err := reg.Claim(ctx, "auth")
	if errors.Is(err, workerid.ErrCollision) {
		t.Fatalf("the retry collides with its own process's failed claim: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
}

// TestClaim_FailedWaitingForTheFloorWithItsReleaseLostIsAbandonedByTheNextClaim: the claim
// took the slot, but the slot's high-water mark (a crashed holder's reservation) is ahead
// of the local clock by more than the caller's deadline, so Claim fails at once and releases
// the slot it took. That release is lost (the network went away meanwhile). As for a claim
// whose reply was lost, the Registry's next Claim must send that release again first, and
// not collide with its own process's failed claim for a TTL.
func TestClaim_FailedWaitingForTheFloorWithItsReleaseLostIsAbandonedByTheNextClaim(t *testing.T) {
	t.Parallel()
	// A crashed holder's reservation, ahead of the local clock by less than two TTLs.
	g := newLostReplyRig(t, time.Now().Add(testTTL*3/4), 10*time.Second)
	lostRelease := g.loseFirstRelease()
	reg := g.registry(t)

	short, cancel := context.WithTimeout(g.ctx, testTTL/4)
	_, err := reg.Claim(short, "auth")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Claim with a deadline before the floor: %v, want context.DeadlineExceeded", err)
	}
	if !lostRelease.Done() {
		t.Fatal("the failed Claim sent no release")
	}
	if n := g.direct.Exists(g.ctx, rigSlot).Val(); n != 1 {
		t.Fatal("the failed claim's slot is free although its release was lost")
	}
	g.nextClaimSucceeds(t, reg)
}

// TestClaim_RetriesAfterLostRepliesDoNotPushTheMarkAwayTTLByTTL: Claims whose replies are
// lost (the claim ran) are each released by their own token. Their releases kept the
// reservation each claim made, max(floor, now)+TTL, and the next claim found it as its floor
// and reserved a TTL above it: every failed attempt moved the mark one more TTL ahead of the
// clock, however little time passed. After three quick failures the next lease's floor was
// 5 s ahead: Claim returned at once ("clock behind") and the generator refused with
// ErrClockBackwards, as would any process that took the slot. Now the release puts the mark
// back to the floor the claim found: the floor stays within a TTL.
func TestClaim_RetriesAfterLostRepliesDoNotPushTheMarkAwayTTLByTTL(t *testing.T) {
	t.Parallel()
	g := newLostReplyRig(t, time.Now().Add(-time.Second), 20*time.Second)
	ctx, p, direct, c, reg := g.ctx, g.p, g.direct, g.c, g.registry(t)
	const slot = rigSlot

	start := time.Now()
	const failures = 3
	for i := range failures {
		if err := c.Ping(ctx).Err(); err != nil { // a pooled connection: the next reply is the claim's
			t.Fatal(err)
		}
		dropped := p.DropNextReply()
		if _, err := reg.Claim(ctx, "auth"); err == nil {
			t.Fatalf("attempt %d: Claim succeeded although its reply was dropped", i)
		}
		select {
		case <-dropped:
		default:
			t.Fatalf("attempt %d: no reply was dropped", i)
		}
		if n := direct.Exists(ctx, slot).Val(); n != 0 {
			t.Fatalf("attempt %d: the failed claim's slot is still held", i)
		}
	}
	l, err := reg.Claim(ctx, "auth")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	ahead := time.Until(time.UnixMilli(l.State().FloorUnixMilli))
	t.Logf("%d failed Claims in %s; the next Claim returned with the floor %s ahead of the clock",
		failures, time.Since(start).Round(time.Millisecond), ahead.Round(time.Millisecond))
	if _, err := bound(t, l).NextID(ctx); err != nil || ahead > testTTL {
		t.Fatalf("after %d quick failed Claims the floor is %s ahead (want at most one TTL, %s); NextID: %v", failures, ahead.Round(time.Millisecond), testTTL, err)
	}
}
