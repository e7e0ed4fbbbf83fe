package workerid_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// The ID spaces these tests use, as a slot's space key records them.
var (
	defaultSpace = "41/10/12@" + strconv.FormatInt(snowflake.DefaultEpoch.UnixMilli(), 10)
	layout8x13   = "42/8/13@" + strconv.FormatInt(snowflake.DefaultEpoch.UnixMilli(), 10)
)

func spaceOf(layout snowflake.Layout, epoch time.Time) string {
	return layout.String() + "@" + strconv.FormatInt(epoch.UnixMilli(), 10)
}

// spaceKey is the key a slot's ID space is recorded in.
func spaceKey(id int64) string { return workerid.SlotKey(workerid.DefaultKeyPrefix, id) + ":space" }

// raw reads and writes keys of one store directly, as an operator, an older client or
// another Registry would.
type raw struct {
	get func(t *testing.T, key string) (string, bool)
	del func(t *testing.T, key string)
	// vanish deletes slot id and records space beside its mark, in one step, as a
	// Registry of that space leaves the slot after it took the WorkerID and released it.
	vanish func(t *testing.T, id int64, space string)
}

func rawOf(t *testing.T, s store) raw {
	switch s.name {
	case "redis":
		c := redisClient(s.addr)
		t.Cleanup(func() { _ = c.Close() })
		return raw{
			get: func(t *testing.T, key string) (string, bool) {
				v, err := c.Get(context.Background(), key).Result()
				if err != nil && !errors.Is(err, redis.Nil) {
					t.Fatal(err)
				}
				return v, err == nil
			},
			del: func(t *testing.T, key string) {
				if err := c.Del(context.Background(), key).Err(); err != nil {
					t.Fatal(err)
				}
			},
			vanish: func(t *testing.T, id int64, space string) {
				ctx := context.Background()
				_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Del(ctx, workerid.SlotKey(workerid.DefaultKeyPrefix, id))
					p.Set(ctx, spaceKey(id), space, time.Hour)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			},
		}
	default:
		c, err := etcdClient(s.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return raw{
			get: func(t *testing.T, key string) (string, bool) {
				resp, err := c.Get(context.Background(), key)
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Kvs) == 0 {
					return "", false
				}
				if resp.Kvs[0].Lease != 0 {
					t.Fatalf("%s is attached to etcd lease %x: it must outlive every holder", key, resp.Kvs[0].Lease)
				}
				return string(resp.Kvs[0].Value), true
			},
			del: func(t *testing.T, key string) {
				if _, err := c.Delete(context.Background(), key); err != nil {
					t.Fatal(err)
				}
			},
			vanish: func(t *testing.T, id int64, space string) {
				_, err := c.Txn(context.Background()).
					Then(clientv3.OpDelete(workerid.SlotKey(workerid.DefaultKeyPrefix, id)), clientv3.OpPut(spaceKey(id), space)).
					Commit()
				if err != nil {
					t.Fatal(err)
				}
			},
		}
	}
}

// refusal is the error of a Claim the test expects to fail; a lease it got all the same
// is released when the test ends.
func refusal(ctx context.Context, t *testing.T, reg *workerid.Registry, service string) error {
	l, err := reg.Claim(ctx, service)
	if err == nil {
		t.Cleanup(func() { _ = l.Release(context.Background()) })
	}
	return err
}

// issueSpan issues IDs on g until they span at least d of their own time, and returns them.
func issueSpan(ctx context.Context, t *testing.T, g *snowflake.Generator, d time.Duration) []int64 {
	t.Helper()
	var ids []int64
	for {
		batch, err := g.NextN(ctx, 1000)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, batch...)
		first, _ := g.Decode(ids[0])
		last, _ := g.Decode(ids[len(ids)-1])
		if last.Time.Sub(first.Time) >= d {
			return ids
		}
	}
}

// TestClaim_ARegistryOfAnotherEpochIsRefusedTheSlot: A (the default epoch) holds WorkerID
// 3, issues IDs for 100 ms of their time and releases. B, whose epoch is later by about the
// time since A's first ID, takes the same WorkerID on the same prefix: the slot's mark is
// A's last Unix millisecond, and B issues above it, but B's IDs count from its own epoch,
// so they carry the times of A's IDs, and in each such millisecond B's sequence starts at
// 0 as A's did: the same IDs (27,000-31,000 in the review that found it). Now the slot
// records A's ID space beside the mark and B's claim is refused, naming both; it took
// nothing, and a Registry of A's space claims the WorkerID on above A's IDs.
func TestClaim_ARegistryOfAnotherEpochIsRefusedTheSlot(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 30*time.Second)
			a := claim(t, s.registry(t, workerid.WithIdentity("auth-3", "a"), workerid.WithoutHeartbeat()), "auth")
			ga := bound(t, a)
			idsA := issueSpan(ctx, t, ga, 100*time.Millisecond)
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			markA, ok := rawOf(t, s).get(t, workerid.SlotKey(workerid.DefaultKeyPrefix, 3)+":hw")
			if !ok {
				t.Fatal("no high-water mark after A's release")
			}
			firstA, _ := ga.Decode(idsA[0])
			epochB := snowflake.DefaultEpoch.Add(time.Since(firstA.Time).Truncate(time.Millisecond))

			regB := s.registry(t, workerid.WithEpoch(epochB), workerid.WithIdentity("auth-3", "b"), workerid.WithoutHeartbeat())
			b, err := regB.Claim(ctx, "auth")
			if err == nil {
				t.Cleanup(func() { _ = b.Release(context.Background()) })
				gb, err := snowflake.New(b.WorkerID(), snowflake.WithLease(b), snowflake.WithEpoch(epochB))
				if err != nil {
					t.Fatal(err)
				}
				issuedA := make(map[int64]bool, len(idsA))
				for _, id := range idsA {
					issuedA[id] = true
				}
				dups, n := 0, 0
				for n < len(idsA) {
					ids, err := gb.NextN(ctx, 1000)
					if err != nil {
						t.Fatal(err)
					}
					for _, id := range ids {
						if issuedA[id] {
							dups++
						}
					}
					n += len(ids)
				}
				t.Fatalf("a Registry of epoch %s claimed WorkerID %d after one of epoch %s released it: %d of the first %d IDs its generator issued were A's",
					epochB.Format(time.RFC3339Nano), b.WorkerID(), snowflake.DefaultEpoch.Format(time.RFC3339), dups, n)
			}
			if !errors.Is(err, workerid.ErrSpaceMismatch) {
				t.Fatalf("claim of another epoch: %v, want ErrSpaceMismatch", err)
			}
			sm, _ := errors.AsType[*workerid.SpaceMismatchError](err)
			wantB := spaceOf(snowflake.DefaultLayout, epochB)
			if sm.WorkerID != 3 || sm.Slot != defaultSpace || sm.Registry != wantB || sm.Key != workerid.SlotKey(workerid.DefaultKeyPrefix, 3) {
				t.Fatalf("mismatch %+v, want worker id 3, slot space %s, registry space %s", sm, defaultSpace, wantB)
			}
			for _, want := range []string{
				"worker id 3: the slot's IDs are of space " + defaultSpace + " (layout 41/10/12, epoch 2024-01-01T00:00:00Z), recorded in lockgov:workerid:{3}:space;",
				"this Registry's are of space " + wantB + " (layout 41/10/12, epoch " + epochB.Format(time.RFC3339Nano) + ")",
				"WithEpoch",
			} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("the error does not name %q: %v", want, err)
				}
			}
			// Nothing was taken or moved: A's space claims the slot, with A's mark as its
			// floor, and issues above A's IDs.
			a2 := claim(t, s.registry(t, workerid.WithIdentity("auth-3", "a2"), workerid.WithoutHeartbeat()), "auth")
			if floor := strconv.FormatInt(a2.State().FloorUnixMilli, 10); floor != markA {
				t.Fatalf("after the refused claim, the next holder's floor is %s, want A's mark %s", floor, markA)
			}
			id, err := bound(t, a2).NextID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if id <= idsA[len(idsA)-1] {
				t.Fatalf("after the refused claim, the next holder of A's space issued %d, not above A's last %d", id, idsA[len(idsA)-1])
			}
		})
	}
}

// TestClaim_ARegistryOfAnotherLayoutIsRefusedTheSlot: the same for the layout. A Registry
// of 42/8/13 held WorkerID 3 and released it; one of the default layout, whose IDs split
// the same bits otherwise, is refused it, held or released.
func TestClaim_ARegistryOfAnotherLayoutIsRefusedTheSlot(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 30*time.Second)
			a := claim(t, s.registry(t, workerid.WithLayout(snowflake.Layout8x13), workerid.WithIdentity("auth-3", "a"), workerid.WithoutHeartbeat()), "auth")
			ga, err := snowflake.New(a.WorkerID(), snowflake.WithLease(a), snowflake.WithLayout(snowflake.Layout8x13))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ga.NextN(ctx, 100); err != nil {
				t.Fatal(err)
			}
			regB := s.registry(t, workerid.WithIdentity("auth-3", "b"), workerid.WithoutHeartbeat())
			// Held: the space is the first thing wrong (the slot will be free one day).
			if err := refusal(ctx, t, regB, "auth"); !errors.Is(err, workerid.ErrSpaceMismatch) {
				t.Fatalf("claim of the default layout while 42/8/13 holds the slot: %v, want ErrSpaceMismatch", err)
			}
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			err = refusal(ctx, t, regB, "auth")
			if !errors.Is(err, workerid.ErrSpaceMismatch) || !strings.Contains(err.Error(), "the slot's IDs are of space "+layout8x13) ||
				!strings.Contains(err.Error(), "this Registry's are of space "+defaultSpace) {
				t.Fatalf("claim of the default layout after 42/8/13 released the slot: %v, want ErrSpaceMismatch naming both spaces", err)
			}
		})
	}
}

// TestClaim_ASlotWithoutASpaceKeyIsAcceptedAndRecorded: a slot last used by a Registry
// older than the space key has a mark and no space (simulated: the key deleted). In a
// rolling upgrade every slot starts so, and refusing them would stop the fleet: the claim
// is accepted, with the mark as its floor, and records its space, which from then on
// refuses another.
func TestClaim_ASlotWithoutASpaceKeyIsAcceptedAndRecorded(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 30*time.Second)
			r := rawOf(t, s)
			old := claim(t, s.registry(t, workerid.WithIdentity("auth-3", "old"), workerid.WithoutHeartbeat()), "auth")
			ids, err := bound(t, old).NextN(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			if err := old.Release(ctx); err != nil {
				t.Fatal(err)
			}
			mark, ok := r.get(t, workerid.SlotKey(workerid.DefaultKeyPrefix, 3)+":hw")
			if !ok {
				t.Fatal("no high-water mark after a release")
			}
			r.del(t, spaceKey(3)) // as an older Registry leaves its slots

			l := claim(t, s.registry(t, workerid.WithIdentity("auth-3", "new"), workerid.WithoutHeartbeat()), "auth")
			if got := strconv.FormatInt(l.State().FloorUnixMilli, 10); got != mark {
				t.Fatalf("floor %s, want the mark the older Registry left, %s", got, mark)
			}
			if got, ok := r.get(t, spaceKey(3)); !ok || got != defaultSpace {
				t.Fatalf("space key %q (present %v) after the claim, want %q", got, ok, defaultSpace)
			}
			id, err := bound(t, l).NextID(ctx)
			if err != nil || id <= ids[len(ids)-1] {
				t.Fatalf("first ID %d (%v), want one above the older Registry's last %d", id, err, ids[len(ids)-1])
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			later := snowflake.DefaultEpoch.AddDate(0, 1, 0)
			err = refusal(ctx, t, s.registry(t, workerid.WithEpoch(later), workerid.WithIdentity("auth-3", "x"), workerid.WithoutHeartbeat()), "auth")
			if !errors.Is(err, workerid.ErrSpaceMismatch) {
				t.Fatalf("claim of another epoch after the space was recorded: %v, want ErrSpaceMismatch", err)
			}
		})
	}
}

// TestClaim_AWalkOverTheRangePassesBySlotsOfAnotherEpochNotOfAnotherLayout: WithNextFree
// (and a host without an ordinal) takes the first slot it may. A slot of another epoch of
// the same layout is passed by like a held one: on different WorkerIDs the two epochs'
// IDs never meet, the worker bits differ. A slot of another layout fails the Claim: IDs
// of two layouts meet across WorkerIDs, so no slot of the range is safe. A range with
// only slots of another space is ErrNoFreeSlot that says so.
func TestClaim_AWalkOverTheRangePassesBySlotsOfAnotherEpochNotOfAnotherLayout(t *testing.T) {
	t.Parallel()
	later := snowflake.DefaultEpoch.AddDate(0, 1, 0)
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 30*time.Second)
			a := claim(t, s.registry(t, workerid.WithIdentity("auth-3", "a"), workerid.WithoutHeartbeat()), "auth")
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// Preferred slot 3 is of the default epoch: the next, 4, is free.
			b := claim(t, s.registry(t, workerid.WithEpoch(later), workerid.WithNextFree(), workerid.WithIdentity("auth-3", "b"), workerid.WithoutHeartbeat()), "auth")
			if b.WorkerID() != 4 {
				t.Fatalf("WithNextFree and another epoch on slot 3: WorkerID %d, want 4", b.WorkerID())
			}
			// Without an ordinal, the same walk: slot 3 passed by, 4 held by b, 5 free.
			c := claim(t, s.registry(t, workerid.WithEpoch(later), workerid.WithServiceRange("auth", 3, 9), workerid.WithIdentity("canary", "c"), workerid.WithoutHeartbeat()), "auth")
			if c.WorkerID() != 5 {
				t.Fatalf("no ordinal, another epoch on slot 3, slot 4 held: WorkerID %d, want 5", c.WorkerID())
			}
			// Another layout: the whole Claim fails.
			err := refusal(ctx, t, s.registry(t, workerid.WithLayout(snowflake.Layout8x13), workerid.WithNextFree(), workerid.WithIdentity("auth-3", "d"), workerid.WithoutHeartbeat()), "auth")
			if !errors.Is(err, workerid.ErrSpaceMismatch) || errors.Is(err, workerid.ErrNoFreeSlot) {
				t.Fatalf("WithNextFree and another layout on slot 3: %v, want ErrSpaceMismatch, not a walk on", err)
			}
			// A range whose one slot is of another epoch: no free slot, and the error says why.
			err = refusal(ctx, t, s.registry(t, workerid.WithEpoch(later), workerid.WithServiceRange("tiny", 3, 3), workerid.WithNextFree(), workerid.WithIdentity("tiny", "f"), workerid.WithoutHeartbeat()), "tiny")
			if !errors.Is(err, workerid.ErrNoFreeSlot) || !errors.Is(err, workerid.ErrSpaceMismatch) || !strings.Contains(err.Error(), "0 held, 1 of another ID space") {
				t.Fatalf("a range whose one slot is of another epoch: %v, want ErrNoFreeSlot wrapping ErrSpaceMismatch", err)
			}
		})
	}
}

// TestRelease_KeepsTheSpaceAsLongAsTheMark: the space key says which space the mark's
// IDs are in, so it must live as long as the mark. Release does not delete it. On Redis,
// where both expire (WithHighWaterTTL), every write of the mark writes the space under
// the same TTL: claim, renewal and release leave the space's expiry at or after the
// mark's (PEXPIRETIME, read in one transaction). On etcd neither has a lease.
func TestRelease_KeepsTheSpaceAsLongAsTheMark(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 30*time.Second)
			r := rawOf(t, s)
			hwKey := workerid.SlotKey(workerid.DefaultKeyPrefix, 3) + ":hw"
			expiries := func(when string) {}
			if s.name == "redis" {
				c := redisClient(s.addr)
				t.Cleanup(func() { _ = c.Close() })
				expiries = func(when string) {
					t.Helper()
					var hw, space *redis.Cmd
					_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
						hw, space = p.Do(ctx, "PEXPIRETIME", hwKey), p.Do(ctx, "PEXPIRETIME", spaceKey(3))
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
					h, _ := hw.Int64()
					sp, _ := space.Int64()
					if h <= 0 || sp < h {
						t.Fatalf("%s: the space key expires at %d, the mark at %d (Unix ms; -1 never, -2 no key): the space must not expire first", when, sp, h)
					}
				}
			}
			l := claim(t, s.registry(t, workerid.WithIdentity("auth-3", ""), workerid.WithoutHeartbeat(), workerid.WithHighWaterTTL(time.Hour)), "auth")
			g := bound(t, l)
			expiries("after the claim")
			e0 := l.ExpiresAt()
			testenv.WaitFor(t, 2*testTTL, "a renewal", func() bool { return l.ExpiresAt().After(e0) })
			expiries("after a renewal")
			if _, err := g.NextN(ctx, 10); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			expiries("after the release")
			if got, ok := r.get(t, spaceKey(3)); !ok || got != defaultSpace {
				t.Fatalf("space key %q (present %v) after Release, want %q kept", got, ok, defaultSpace)
			}
		})
	}
}

// TestRenew_AReclaimThatFindsAnotherSpaceEndsTheLease: A's slot vanished (A was cut off
// past its TTL, say) and a Registry of another epoch took the WorkerID, issued and
// released it. A's renewal finds the slot gone and claims it again: that claim finds the
// other space recorded and is refused, and A's lease ends (ErrTakenOver, wrapping
// ErrSpaceMismatch) instead of issuing, in A's epoch, above the other's mark.
func TestRenew_AReclaimThatFindsAnotherSpaceEndsTheLease(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 30*time.Second)
			r := rawOf(t, s)
			a := claim(t, s.registry(t, workerid.WithIdentity("auth-3", ""), workerid.WithoutHeartbeat()), "auth")
			g := bound(t, a)
			r.vanish(t, 3, spaceOf(snowflake.DefaultLayout, snowflake.DefaultEpoch.AddDate(0, 1, 0)))
			select {
			case <-a.Done():
			case <-ctx.Done():
				t.Fatal("the lease did not end")
			}
			if !errors.Is(a.Err(), workerid.ErrTakenOver) || !errors.Is(a.Err(), workerid.ErrSpaceMismatch) {
				t.Fatalf("lease error %v, want ErrTakenOver wrapping ErrSpaceMismatch", a.Err())
			}
			if _, err := g.NextID(ctx); !errors.Is(err, snowflake.ErrWorkerLeaseLost) {
				t.Fatalf("NextID after the lease ended: %v, want ErrWorkerLeaseLost", err)
			}
		})
	}
}

// TestClaim_OnARedisClusterASlotsKeysShareAHashSlot: on a Cluster one script reaches the
// slot, its mark and its space only if the three keys hash to one slot (else CROSSSLOT).
// WorkerIDs 0-5 spread over three primaries; each is claimed, used and released, and then
// refused to a Registry of another epoch.
func TestClaim_OnARedisClusterASlotsKeysShareAHashSlot(t *testing.T) {
	t.Parallel()
	cl := testenv.NewRedisCluster(t, 3)
	ctx := ctxT(t, 60*time.Second)
	const ttl = 500 * time.Millisecond // a never-used slot on Redis waits one TTL
	reg := func(epoch time.Time) *workerid.Registry {
		r, err := workerid.NewRedis(cl.Client(t), workerid.WithTTL(ttl), workerid.WithEpoch(epoch),
			workerid.WithServiceRange("auth", 0, 5), workerid.WithNextFree(), workerid.WithIdentity("canary", ""), workerid.WithoutHeartbeat())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := reg(snowflake.DefaultEpoch)
	var leases []*workerid.Lease
	for range 6 {
		l := claim(t, a, "auth")
		if _, err := bound(t, l).NextN(ctx, 10); err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	err := refusal(ctx, t, reg(snowflake.DefaultEpoch.AddDate(0, 1, 0)), "auth")
	if !errors.Is(err, workerid.ErrNoFreeSlot) || !strings.Contains(err.Error(), "0 held, 6 of another ID space") {
		t.Fatalf("claim of another epoch over WorkerIDs 0-5, all of the default epoch: %v, want ErrNoFreeSlot, 6 of another space", err)
	}
}
