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
// releases it by its own token, keeping the high-water mark the script raised.
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
	if m, err := direct.Get(ctx, hw).Int64(); err != nil || m <= prevMark {
		t.Fatalf("high-water mark %d (%v) after the failed claim, want the claim's reservation kept, above %d", m, err, prevMark)
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
