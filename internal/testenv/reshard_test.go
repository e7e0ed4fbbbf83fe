package testenv

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestMigrateSlot_HalfMigratedSlotAnswersAskAndTryagain checks the helper
// does what redis-cli --cluster reshard does: while the slot is half
// migrated a key still on the source is served there, a moved key is
// redirected with ASK, a multi-key script whose keys are split gets
// TRYAGAIN; after Finish the target owns the slot with every key and TTL.
func TestMigrateSlot_HalfMigratedSlotAnswersAskAndTryagain(t *testing.T) {
	c := NewRedisCluster(t, 3)
	cc := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := []string{"{h98}:a", "{h98}:b", "{h98}:c", "{h98}:d"}
	for _, k := range keys {
		if err := cc.Set(ctx, k, k, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot, err := c.KeySlot(keys[0])
	if err != nil {
		t.Fatal(err)
	}
	from, err := c.SlotOwner(slot)
	if err != nil {
		t.Fatal(err)
	}
	to := c.OtherPrimary(from)
	m, err := c.BeginSlotMigration(slot, to)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Move(keys[0]); err != nil {
		t.Fatal(err)
	}
	src := NewRedisClient(t, from.Addr())
	if v, err := src.Get(ctx, keys[1]).Result(); err != nil || v != keys[1] {
		t.Fatalf("key not yet moved: GET on the source = %q, %v", v, err)
	}
	if err := src.Get(ctx, keys[0]).Err(); err == nil || !strings.HasPrefix(err.Error(), "ASK ") {
		t.Fatalf("moved key: GET on the source = %v, want ASK", err)
	}
	split := src.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{keys[0], keys[1]})
	if err := split.Err(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") && !strings.HasPrefix(err.Error(), "ASK ") {
		t.Fatalf("split script on the source = %v, want TRYAGAIN or ASK", err)
	}
	// The cluster client follows ASK for a single key.
	if v, err := cc.Get(ctx, keys[0]).Result(); err != nil || v != keys[0] {
		t.Fatalf("cluster client GET of a moved key = %q, %v", v, err)
	}
	if err := m.Finish(2); err != nil {
		t.Fatal(err)
	}
	if owner, err := c.SlotOwner(slot); err != nil || owner != to {
		t.Fatalf("after Finish the slot is on %v (%v), want %s", owner, err, to.Addr())
	}
	dst := NewRedisClient(t, to.Addr())
	for _, k := range keys {
		if ttl, err := dst.PTTL(ctx, k).Result(); err != nil || ttl <= 0 {
			t.Fatalf("%s on the target: PTTL %v, %v", k, ttl, err)
		}
	}
	if err := c.MigrateSlot(slot, from, 3, nil); err != nil {
		t.Fatalf("migrating back: %v", err)
	}
	if owner, _ := c.SlotOwner(slot); owner != from {
		t.Fatalf("slot not back on %s", from.Addr())
	}
}

// TestKeyOwner_IsTheNodeThatServesTheKeyAndFollowsAMigration: the node
// KeyOwner names answers for the key and every other primary redirects it
// there with MOVED, before and after the key's slot moves; with the node it
// asks for the slot down, the error names the key.
func TestKeyOwner_IsTheNodeThatServesTheKeyAndFollowsAMigration(t *testing.T) {
	c := NewRedisCluster(t, 3)
	key := "{h108}:owner"
	servedBy := func(owner *Redis) {
		t.Helper()
		for _, n := range c.Nodes {
			_, err := command(n.Addr(), "EXISTS", key)
			switch {
			case n == owner && err != nil:
				t.Fatalf("KeyOwner(%q) = %s, which answers %v", key, owner.Addr(), err)
			case n != owner && (err == nil || !strings.HasSuffix(err.Error(), " "+owner.Addr())):
				t.Fatalf("%s answers %v for %q; want MOVED to KeyOwner's %s", n.Addr(), err, key, owner.Addr())
			}
		}
	}
	from, err := c.KeyOwner(key)
	if err != nil {
		t.Fatal(err)
	}
	servedBy(from)
	// The slot moves away from from: KeyOwner must follow it, so one of
	// the two answers is a node other than Nodes[0].
	m, err := c.BeginKeyMigration(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Finish(10); err != nil {
		t.Fatal(err)
	}
	to, err := c.KeyOwner(key)
	if err != nil {
		t.Fatal(err)
	}
	if to != m.To {
		t.Fatalf("after the migration to %s KeyOwner = %s", m.To.Addr(), to.Addr())
	}
	servedBy(to)

	if err := c.Nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.KeyOwner(key); err == nil || !strings.Contains(err.Error(), key) {
		t.Fatalf("KeyOwner with the node it asks down = %v; want an error naming %q", err, key)
	}
}
