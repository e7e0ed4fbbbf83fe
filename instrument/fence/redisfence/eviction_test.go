package redisfence_test

import (
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/fence/redisfence"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestEviction_AnEvictedFenceAcceptsAStaleWrite: the stored fence is the
// only memory of which holder wrote last. Evicted (a value with a TTL under
// any policy but noeviction, a value without one under allkeys-*), it reads
// as never written, and the next Set is accepted whatever its fence: a holder
// whose lock was taken over writes over, or beside, the newer holder's value.
// Under volatile-* a Set with ttl 0 leaves keys Redis never evicts.
func TestEviction_AnEvictedFenceAcceptsAStaleWrite(t *testing.T) {
	for _, tc := range []struct {
		policy string
		ttl    time.Duration
	}{
		{"volatile-lru", time.Hour},
		{"allkeys-lru", 0},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			c := testenv.NewRedis(t).Client(t)
			w := newWriter(t, c)
			ctx := timeout(t, 30*time.Second)
			if err := w.Set(ctx, "stock:{sku-1}", "41", 7, tc.ttl); err != nil {
				t.Fatal(err)
			}
			if err := w.Set(ctx, "stock:{sku-1}", "stale", 5, tc.ttl); err == nil {
				t.Fatal("stale write accepted before the eviction: the test checks nothing")
			}
			fk, err := redisfence.FenceKey("stock:{sku-1}")
			if err != nil {
				t.Fatal(err)
			}
			testenv.Evict(t, c, tc.policy, fk)
			if err := w.Set(ctx, "stock:{sku-1}", "stale", 5, tc.ttl); err != nil {
				t.Fatalf("stale write after the fence was evicted = %v; want accepted (the store forgot fence 7)", err)
			}
			if v, f, err := w.Get(ctx, "stock:{sku-1}"); err != nil || v != "stale" || f != 5 {
				t.Fatalf("Get = %q, %d, %v; want the stale holder's value under fence 5", v, f, err)
			}
		})
	}
}
