package workerid_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// TestDecodeClaim_ReadsBackTheClaimWithoutTheToken holds what the agent
// reads: a held slot's key is SlotKey(prefix, id) on both stores, and its
// value decodes to the claim that wrote it, never the owner token.
func TestDecodeClaim_ReadsBackTheClaimWithoutTheToken(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	rc := redisClient(r.Addr())
	t.Cleanup(func() { _ = rc.Close() })
	e := testenv.NewEtcd(t)
	ec := e.Client(t)
	for _, tc := range []struct {
		name string
		reg  func() (*workerid.Registry, error)
		get  func(ctx context.Context, key string) ([]byte, error)
	}{
		{"redis", func() (*workerid.Registry, error) { return workerid.NewRedis(rc, workerid.WithTTL(testTTL)) },
			func(ctx context.Context, key string) ([]byte, error) { return rc.Get(ctx, key).Bytes() }},
		{"etcd", func() (*workerid.Registry, error) { return workerid.NewEtcd(ec, workerid.WithTTL(testTTL)) },
			func(ctx context.Context, key string) ([]byte, error) {
				resp, err := ec.Get(ctx, key)
				if err != nil || len(resp.Kvs) == 0 {
					return nil, err
				}
				return resp.Kvs[0].Value, nil
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, err := tc.reg()
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t, 30*time.Second)
			l := claim(t, reg, "auth")
			defer l.Release(ctx)
			key := workerid.SlotKey(workerid.DefaultKeyPrefix, l.WorkerID())
			if id, ok := workerid.ParseSlotKey(workerid.DefaultKeyPrefix, key); !ok || id != l.WorkerID() {
				t.Fatalf("ParseSlotKey(%q) = %d, %v", key, id, ok)
			}
			raw, err := tc.get(ctx, key)
			if err != nil || raw == nil {
				t.Fatalf("slot key %q: %q, %v", key, raw, err)
			}
			c, ok := workerid.DecodeClaim(raw)
			if !ok || c.Service != "auth" || c.WorkerID != l.WorkerID() || c.PID == 0 || c.ClaimedAt.IsZero() {
				t.Fatalf("DecodeClaim(%s) = %+v, %v", raw, c, ok)
			}
			if !strings.Contains(string(raw), `"owner"`) {
				t.Fatalf("slot value %s has no owner: the test reads the wrong key", raw)
			}
		})
	}
}

func TestDecodeClaim_ForeignValuesAndKeys(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"", "1", `{"service":"auth"}`, `{"owner":""}`, "garbage"} {
		if c, ok := workerid.DecodeClaim([]byte(v)); ok {
			t.Errorf("DecodeClaim(%q) = %+v, want not ok", v, c)
		}
	}
	p := workerid.DefaultKeyPrefix
	for _, k := range []string{p + "{7}:hw", p + "{7}:space", p + "7", p + "{x}", p + "{-1}", "other:{7}"} {
		if _, ok := workerid.ParseSlotKey(p, k); ok {
			t.Errorf("ParseSlotKey accepted %q", k)
		}
	}
}
