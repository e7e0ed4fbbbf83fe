package workerid_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// TestClaim_FailedWithItsReplyLostLeavesTheSlotFree: the claim script ran but its reply
// never came, so Claim failed. The slot it took is held under a token nobody has; left
// alone, this process's next Claim would collide with itself for a TTL. The failed Claim
// releases it by its own token, and puts the high-water mark back to the floor the claim
// found: nothing was issued under it.
func TestClaim_FailedWithItsReplyLostLeavesTheSlotFree(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	direct := redisClient(r.Addr())
	t.Cleanup(func() { _ = direct.Close() })
	ctx := ctxT(t, 10*time.Second)
	const slot, hw = "lockgov:workerid:{4}", "lockgov:workerid:{4}:hw"
	prevMark := time.Now().Add(-time.Second).UnixMilli() // a previous holder released a second ago
	if err := direct.Set(ctx, hw, prevMark, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	// Loaded, so that the dropped reply is the script's, not a NOSCRIPT before it.
	src, err := os.ReadFile("claim.lua")
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.ScriptLoad(ctx, string(src)).Err(); err != nil {
		t.Fatal(err)
	}
	c := redisClient(p.Addr())
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(ctx).Err(); err != nil { // a pooled connection: the next reply is the claim's
		t.Fatal(err)
	}
	reg, err := workerid.NewRedis(c, workerid.WithTTL(testTTL), workerid.WithIdentity("auth-4", ""), workerid.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}

	dropped := p.DropNextReply()
	if _, err := reg.Claim(ctx, "auth"); err == nil {
		t.Fatal("Claim succeeded although its reply was dropped")
	}
	select {
	case <-dropped:
	default:
		t.Fatal("no reply was dropped")
	}
	if n := direct.Exists(ctx, slot).Val(); n != 0 {
		t.Fatalf("after a Claim that failed, the slot it took is still held: %q", direct.Get(ctx, slot).Val())
	}
	if m, err := direct.Get(ctx, hw).Int64(); err != nil || m != prevMark {
		t.Fatalf("high-water mark %d (%v) after the failed claim, want it back at the floor the claim found, %d", m, err, prevMark)
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

// TestClaim_NextClaimAbandonsAFailedClaimThatCouldNotBeReleased: the claim script ran, its
// reply was lost, and the release that follows it was lost too (the network went away
// meanwhile). The Registry keeps the failed claim, and the next Claim releases it first:
// it does not collide with its own process's earlier claim.
func TestClaim_NextClaimAbandonsAFailedClaimThatCouldNotBeReleased(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	direct := redisClient(r.Addr())
	t.Cleanup(func() { _ = direct.Close() })
	ctx := ctxT(t, 10*time.Second)
	const slot = "lockgov:workerid:{4}"
	if err := direct.Set(ctx, slot+":hw", time.Now().Add(-time.Second).UnixMilli(), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	var releaseSHA string
	for _, f := range []string{"claim.lua", "release.lua"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := direct.ScriptLoad(ctx, string(src)).Err(); err != nil {
			t.Fatal(err)
		}
		releaseSHA = testenv.ScriptSHA(string(src))
	}
	c := redisClient(p.Addr())
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The first release sent (the failed claim's) goes into a black hole.
	lostRelease := &testenv.BeforeScript{SHA: releaseSHA, Do: func() { p.Blackhole(true) }}
	c.AddHook(lostRelease)
	reg, err := workerid.NewRedis(c, workerid.WithTTL(testTTL), workerid.WithIdentity("auth-4", ""), workerid.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}

	p.DropNextReply()
	if _, err := reg.Claim(ctx, "auth"); err == nil {
		t.Fatal("Claim succeeded although its reply was dropped")
	}
	if !lostRelease.Done() {
		t.Fatal("the failed claim sent no release")
	}
	if n := direct.Exists(ctx, slot).Val(); n != 1 {
		t.Fatal("the failed claim's slot is free although its release was lost")
	}
	p.Blackhole(false)
	l, err := reg.Claim(ctx, "auth")
	if errors.Is(err, workerid.ErrCollision) {
		t.Fatalf("the next Claim collides with its own process's failed claim: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
}

// TestEtcdClaim_FailedAfterTheSlotCommittedLeavesTheSlotFree: the claim's transaction
// created the slot on its etcd lease, and then the claim's context ended before the
// high-water raise. The failed Claim revokes its grant, so the slot is free for this
// process's next Claim instead of held by an etcd lease nobody renews or revokes.
func TestEtcdClaim_FailedAfterTheSlotCommittedLeavesTheSlotFree(t *testing.T) {
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
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	direct := redisClient(r.Addr())
	t.Cleanup(func() { _ = direct.Close() })
	ctx := ctxT(t, 10*time.Second)
	const slot = "lockgov:workerid:{4}"
	// A crashed holder's reservation, ahead of the local clock by less than two TTLs.
	if err := direct.Set(ctx, slot+":hw", time.Now().Add(testTTL*3/4).UnixMilli(), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	var releaseSHA string
	for _, f := range []string{"claim.lua", "release.lua"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := direct.ScriptLoad(ctx, string(src)).Err(); err != nil {
			t.Fatal(err)
		}
		releaseSHA = testenv.ScriptSHA(string(src))
	}
	c := redisClient(p.Addr())
	t.Cleanup(func() { _ = c.Close() })
	lostRelease := &testenv.BeforeScript{SHA: releaseSHA, Do: func() { p.Blackhole(true) }}
	c.AddHook(lostRelease)
	reg, err := workerid.NewRedis(c, workerid.WithTTL(testTTL), workerid.WithIdentity("auth-4", ""), workerid.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}

	short, cancel := context.WithTimeout(ctx, testTTL/4)
	_, err = reg.Claim(short, "auth")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Claim with a deadline before the floor: %v, want context.DeadlineExceeded", err)
	}
	if !lostRelease.Done() {
		t.Fatal("the failed Claim sent no release")
	}
	if n := direct.Exists(ctx, slot).Val(); n != 1 {
		t.Fatal("the failed claim's slot is free although its release was lost")
	}
	p.Blackhole(false)
	l, err := reg.Claim(ctx, "auth")
	if errors.Is(err, workerid.ErrCollision) {
		t.Fatalf("the next Claim collides with its own process's failed claim: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
}

// TestClaim_RetriesAfterLostRepliesDoNotPushTheMarkAwayTTLByTTL: Claims whose replies are
// lost (the claim ran) are each released by their own token, keeping the reservation the
// claim made: max(floor, now)+TTL. The next claim finds that reservation as its floor and
// reserves a TTL above it, so every failed attempt moves the mark one more TTL ahead of the
// clock, however little time passed. The docs promise the retry waits for the mark the
// failed claim may have reserved, at most one TTL; after three quick failures the mark is
// three TTLs ahead: Claim returns at once ("clock behind") and the generator refuses with
// ErrClockBackwards for three TTLs, as would any process that takes the slot.
func TestClaim_RetriesAfterLostRepliesDoNotPushTheMarkAwayTTLByTTL(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	direct := redisClient(r.Addr())
	t.Cleanup(func() { _ = direct.Close() })
	ctx := ctxT(t, 20*time.Second)
	const slot = "lockgov:workerid:{4}"
	if err := direct.Set(ctx, slot+":hw", time.Now().Add(-time.Second).UnixMilli(), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"claim.lua", "release.lua"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := direct.ScriptLoad(ctx, string(src)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := redisClient(p.Addr())
	t.Cleanup(func() { _ = c.Close() })
	reg, err := workerid.NewRedis(c, workerid.WithTTL(testTTL), workerid.WithIdentity("auth-4", ""), workerid.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}

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
