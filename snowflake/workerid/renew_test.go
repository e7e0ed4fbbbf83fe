package workerid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// TestRenew_IsOwnerChecked: when another owner's value replaces the slot (as after an
// expiry and a takeover), the renewal must not extend it: the lease ends with
// ErrTakenOver, the generator refuses, and the other owner's key keeps its own TTL.
func TestRenew_IsOwnerChecked(t *testing.T) {
	t.Parallel()
	r := redisStore(t)
	e := etcdStore(t)
	for _, tc := range []struct {
		s     store
		steal func(t *testing.T, key string)
		ttl   func(t *testing.T, key string) time.Duration
	}{
		{
			s: r,
			steal: func(t *testing.T, key string) {
				c := redisClient(r.addr)
				defer c.Close()
				if err := c.Set(context.Background(), key, `{"owner":"someone-else","service":"auth"}`, 0).Err(); err != nil {
					t.Fatal(err)
				}
			},
			ttl: func(t *testing.T, key string) time.Duration {
				c := redisClient(r.addr)
				defer c.Close()
				d, err := c.PTTL(context.Background(), key).Result()
				if err != nil {
					t.Fatal(err)
				}
				return d
			},
		},
		{
			s: e,
			steal: func(t *testing.T, key string) {
				c, err := etcdClient(e.addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				ctx := context.Background()
				if _, err := c.Delete(ctx, key); err != nil {
					t.Fatal(err)
				}
				if _, err := c.Put(ctx, key, `{"owner":"someone-else","service":"auth"}`); err != nil {
					t.Fatal(err)
				}
			},
			ttl: func(t *testing.T, key string) time.Duration {
				c, err := etcdClient(e.addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				resp, err := c.Get(context.Background(), key)
				if err != nil || len(resp.Kvs) != 1 {
					t.Fatalf("get %s: %v", key, err)
				}
				if resp.Kvs[0].Lease != 0 {
					return time.Hour // attached to some lease: not ours to judge here
				}
				return -1 // no lease: nobody extended or attached one
			},
		},
	} {
		t.Run(tc.s.name, func(t *testing.T) {
			t.Parallel()
			l := claim(t, tc.s.registry(t, workerid.WithIdentity("auth-6", "")), "auth")
			g := bound(t, l)
			key := "lockgov:workerid:{6}"
			tc.steal(t, key)
			select {
			case <-l.Done():
			case <-time.After(2 * testTTL):
				t.Fatal("the lease did not notice the takeover")
			}
			if !errors.Is(l.Err(), workerid.ErrTakenOver) {
				t.Fatalf("lease error %v, want ErrTakenOver", l.Err())
			}
			if _, err := g.NextID(context.Background()); !errors.Is(err, snowflake.ErrWorkerLeaseLost) || !errors.Is(err, workerid.ErrTakenOver) {
				t.Fatalf("NextID after takeover: %v", err)
			}
			if d := tc.ttl(t, key); d != -1 {
				t.Fatalf("the other owner's key got a TTL (%s): renewal was not owner-checked", d)
			}
			// Release must not delete the other owner's key either.
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			if d := tc.ttl(t, key); d == -2*time.Nanosecond {
				t.Fatal("Release deleted another owner's key")
			}
		})
	}
}
