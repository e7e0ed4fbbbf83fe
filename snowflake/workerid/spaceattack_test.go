package workerid_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// TestSpace_ALostClaimReplyRetriedByTheSameRegistryIsItsOwnSpace: a Registry of a
// non-default epoch claims WorkerID 4; claim.lua runs (slot, mark and space written) and its
// reply is lost. Retried by the Registry's next Claim (the client does not retry) or by
// go-redis itself (EVALSHA resent after the read timeout), the claim finds the space it
// wrote itself: it must succeed, not be refused (ErrSpaceMismatch) nor collide.
func TestSpace_ALostClaimReplyRetriedByTheSameRegistryIsItsOwnSpace(t *testing.T) {
	t.Parallel()
	epoch := snowflake.DefaultEpoch.Add(time.Hour)
	want := spaceOf(snowflake.DefaultLayout, epoch)
	for _, tc := range []struct {
		name       string
		maxRetries int
	}{{"registry retries", -1}, {"go-redis retries", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newLostReplyRig(t, time.Now().Add(-time.Second), 10*time.Second)
			c := redis.NewClient(&redis.Options{Addr: g.p.Addr(), MaxRetries: tc.maxRetries, DialTimeout: 200 * time.Millisecond,
				ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, ContextTimeoutEnabled: true,
				MinRetryBackoff: -1, MaxRetryBackoff: -1})
			t.Cleanup(func() { _ = c.Close() })
			if err := c.Ping(g.ctx).Err(); err != nil { // pooled: the next reply is the claim's
				t.Fatal(err)
			}
			reg, err := workerid.NewRedis(c, workerid.WithTTL(testTTL), workerid.WithEpoch(epoch),
				workerid.WithIdentity("auth-4", ""), workerid.WithoutHeartbeat())
			if err != nil {
				t.Fatal(err)
			}
			dropped := g.p.DropNextReply()
			l, err := reg.Claim(g.ctx, "auth")
			select {
			case <-dropped:
			default:
				t.Fatal("no reply was dropped")
			}
			if sp := g.direct.Get(g.ctx, rigSlot+":space").Val(); sp != want {
				t.Fatalf("after the claim whose reply was lost the slot records space %q, want %q", sp, want)
			}
			if err != nil {
				if tc.maxRetries > 0 {
					t.Fatalf("Claim retried by go-redis after its reply was lost: %v", err)
				}
				if errors.Is(err, workerid.ErrSpaceMismatch) || errors.Is(err, workerid.ErrCollision) {
					t.Fatalf("the lost claim itself was refused: %v", err)
				}
				l, err = reg.Claim(g.ctx, "auth")
				if err != nil {
					t.Fatalf("the same Registry's retry after its lost claim reply: %v", err)
				}
			}
			if l.WorkerID() != 4 {
				t.Fatalf("worker id %d, want 4", l.WorkerID())
			}
			gen, err := snowflake.New(l.WorkerID(), snowflake.WithLease(l), snowflake.WithEpoch(epoch))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := gen.NextID(g.ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(g.ctx); err != nil {
				t.Fatal(err)
			}
			if sp := g.direct.Get(g.ctx, rigSlot+":space").Val(); sp != want {
				t.Fatalf("after release the slot records space %q, want %q", sp, want)
			}
		})
	}
	// etcd: the slot's transaction (slot, and the space it found missing) committed, and
	// its reply is replaced by an error, as a reply lost on the way back.
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		e := testenv.NewEtcd(t)
		var lose atomic.Bool
		lose.Store(true)
		cut := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if r, ok := reply.(*etcdserverpb.TxnResponse); ok && err == nil && r.Succeeded && lose.Swap(false) {
				return status.Error(codes.Unavailable, "reply lost")
			}
			return err
		}
		c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
			DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(cut)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		reg, err := workerid.NewEtcd(c, workerid.WithTTL(testTTL), workerid.WithEpoch(epoch),
			workerid.WithIdentity("auth-4", ""), workerid.WithoutHeartbeat())
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t, 10*time.Second)
		spaceOn := func() string {
			g, err := c.Get(ctx, spaceKey(4))
			if err != nil || len(g.Kvs) == 0 {
				return ""
			}
			return string(g.Kvs[0].Value)
		}
		l, err := reg.Claim(ctx, "auth")
		if lose.Load() {
			t.Fatal("no transaction reply was lost")
		}
		if sp := spaceOn(); sp != want {
			t.Fatalf("after the claim whose reply was lost the slot records space %q, want %q", sp, want)
		}
		if err != nil {
			if errors.Is(err, workerid.ErrSpaceMismatch) || errors.Is(err, workerid.ErrCollision) {
				t.Fatalf("the lost claim itself was refused: %v", err)
			}
			t.Logf("first Claim: %v", err)
			if l, err = reg.Claim(ctx, "auth"); err != nil {
				t.Fatalf("the same Registry's retry after its lost claim reply: %v", err)
			}
		}
		gen, err := snowflake.New(l.WorkerID(), snowflake.WithLease(l), snowflake.WithEpoch(epoch))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gen.NextID(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if sp := spaceOn(); sp != want {
			t.Fatalf("after release the slot records space %q, want %q", sp, want)
		}
	})
}
