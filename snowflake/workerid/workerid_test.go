package workerid_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func claim(t *testing.T, reg *workerid.Registry, service string) *workerid.Lease {
	t.Helper()
	l, err := reg.Claim(ctxT(t, 5*time.Second), service)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

func bound(t *testing.T, l *workerid.Lease) *snowflake.Generator {
	t.Helper()
	g, err := snowflake.New(l.WorkerID(), snowflake.WithLease(l))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestNewRegistry_RefusesBadConfig(t *testing.T) {
	t.Parallel()
	s := redisStore(t)
	for _, tc := range []struct {
		name string
		opt  workerid.Option
		want string
	}{
		{"range above layout", workerid.WithServiceRange("auth", 0, 1024), "not within [0, 1023]"},
		{"inverted range", workerid.WithServiceRange("auth", 9, 3), "range [9, 3]"},
		{"tiny ttl", workerid.WithTTL(time.Millisecond), "TTL 1ms"},
		{"negative max peer ttl", workerid.WithMaxPeerTTL(-time.Second), "max peer TTL -1s, want >= 0"},
		{"bad layout", workerid.WithLayout(snowflake.Layout{TimeBits: 41, WorkerBits: 10, SequenceBits: 10}), "sum to 61"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redisClient(s.addr)
			defer c.Close()
			_, err := workerid.NewRedis(c, tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestClaim_PreferredSlotIsOrdinalWithinServiceRange(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			reg := s.registry(t, workerid.WithServiceRange("auth", 100, 199), workerid.WithIdentity("auth-7", "10.0.0.7"))
			l := claim(t, reg, "auth")
			if l.WorkerID() != 107 {
				t.Fatalf("WorkerID = %d, want 107 (range start 100 + ordinal 7)", l.WorkerID())
			}
			c := l.Claim()
			if c.Service != "auth" || c.Hostname != "auth-7" || c.PodIP != "10.0.0.7" || c.PID == 0 || c.StartedAt.IsZero() {
				t.Fatalf("claim metadata %+v", c)
			}
			// Without an ordinal: the first free slot of the range.
			l2 := claim(t, s.registry(t, workerid.WithServiceRange("auth", 100, 199), workerid.WithIdentity("auth-canary", "")), "auth")
			if l2.WorkerID() != 100 {
				t.Fatalf("no ordinal: WorkerID = %d, want 100", l2.WorkerID())
			}
			// An ordinal outside the range is a configuration error.
			_, err := s.registry(t, workerid.WithServiceRange("auth", 100, 104), workerid.WithIdentity("auth-7", "")).Claim(ctxT(t, 5*time.Second), "auth")
			if !errors.Is(err, workerid.ErrInvalid) || !strings.Contains(err.Error(), "outside its range [100, 104]") {
				t.Fatalf("ordinal outside range: %v", err)
			}
		})
	}
}

func TestClaim_HeldSlotIsCollisionOrNextFreeWhenOptedIn(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			first := claim(t, s.registry(t, workerid.WithIdentity("auth-2", "10.0.0.2")), "auth")
			_, err := s.registry(t, workerid.WithIdentity("auth-2", "10.0.0.99")).Claim(ctxT(t, 5*time.Second), "auth")
			var ce *workerid.CollisionError
			if !errors.As(err, &ce) || !errors.Is(err, workerid.ErrCollision) {
				t.Fatalf("second claim of slot 2: %v, want *CollisionError", err)
			}
			if ce.WorkerID != 2 || ce.Holder.PodIP != "10.0.0.2" || !strings.Contains(err.Error(), `host "auth-2"`) {
				t.Fatalf("collision error does not name the holder: %v", err)
			}
			next := claim(t, s.registry(t, workerid.WithIdentity("auth-2", ""), workerid.WithNextFree()), "auth")
			if next.WorkerID() == first.WorkerID() || next.WorkerID() != 3 {
				t.Fatalf("WithNextFree took %d, want 3", next.WorkerID())
			}
			// A full range is ErrNoFreeSlot.
			_, err = s.registry(t, workerid.WithServiceRange("tiny", 2, 3), workerid.WithNextFree(), workerid.WithIdentity("tiny", "")).Claim(ctxT(t, 5*time.Second), "tiny")
			if !errors.Is(err, workerid.ErrNoFreeSlot) {
				t.Fatalf("full range: %v, want ErrNoFreeSlot", err)
			}
		})
	}
}

// TestLeaseLoss_GeneratorRefusesBeforeTTLAndResumesAboveHighWater crashes the store under a
// bound generator: it must refuse before the store could have expired the slot, and after
// the store is back it must resume with IDs above everything issued before.
func TestLeaseLoss_GeneratorRefusesBeforeTTLAndResumesAboveHighWater(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			l := claim(t, s.registry(t, workerid.WithIdentity("auth-1", "")), "auth")
			g := bound(t, l)
			ctx := context.Background()
			var last int64
			for range 1000 {
				id, err := g.NextID(ctx)
				if err != nil {
					t.Fatal(err)
				}
				last = id
			}
			time.Sleep(testTTL / 2) // let a renewal happen
			s.down(t)
			expires := l.ExpiresAt() // no renewal can succeed from here on
			var refusedAt time.Time
			for deadline := time.Now().Add(2 * testTTL); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				id, err := g.NextID(ctx)
				if errors.Is(err, snowflake.ErrWorkerLeaseLost) {
					refusedAt = time.Now()
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				last = id
			}
			if refusedAt.IsZero() {
				t.Fatal("the generator never refused while the store was down")
			}
			if !refusedAt.Before(expires) || l.ExpiresAt() != expires {
				t.Fatalf("refused at %s, the slot could expire at %s", refusedAt.Format(time.StampMicro), expires.Format(time.StampMicro))
			}
			t.Logf("refused %s before the earliest expiry", expires.Sub(refusedAt))
			s.up(t)
			var resumed int64
			for deadline := time.Now().Add(3 * testTTL); time.Now().Before(deadline) && resumed == 0; time.Sleep(10 * time.Millisecond) {
				if id, err := g.NextID(ctx); err == nil {
					resumed = id
				} else if !errors.Is(err, snowflake.ErrWorkerLeaseLost) && !errors.Is(err, snowflake.ErrClockBackwards) {
					t.Fatal(err)
				}
			}
			if resumed == 0 {
				t.Fatalf("no ID after the store came back; lease error %v", l.Err())
			}
			if resumed <= last {
				t.Fatalf("resumed at %d, at or below %d issued before the outage", resumed, last)
			}
			if p, _ := g.Decode(resumed); p.Time.UnixMilli() <= l.State().FloorUnixMilli {
				t.Fatalf("resumed at %s, at or below the high-water mark %d", p.Time, l.State().FloorUnixMilli)
			}
		})
	}
}

// TestTakeover_NeverIssuesAtOrBelowPreviousHolder: a holder that loses its store
// connection stops; the next holder of the slot starts above everything it issued.
func TestTakeover_NeverIssuesAtOrBelowPreviousHolder(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			regA, crash := s.crashable(t, workerid.WithIdentity("auth-4", "a"))
			a := claim(t, regA, "auth")
			ga := bound(t, a)
			ids, err := ga.NextN(ctx, 5000)
			if err != nil {
				t.Fatal(err)
			}
			lastA := ids[len(ids)-1]
			// A "crashes": its connection to the store is gone, it never releases, and B
			// waits for the slot to expire.
			crash()
			b := claimEventually(t, s.registry(t, workerid.WithIdentity("auth-4", "b")), "auth", 3*testTTL)
			if b.WorkerID() != a.WorkerID() {
				t.Fatalf("B got %d, want A's slot %d", b.WorkerID(), a.WorkerID())
			}
			if _, err := ga.NextID(ctx); !errors.Is(err, snowflake.ErrWorkerLeaseLost) {
				t.Fatalf("A issued after its slot was taken: %v", err)
			}
			gb := bound(t, b)
			var first int64
			for deadline := time.Now().Add(2 * testTTL); time.Now().Before(deadline) && first == 0; time.Sleep(5 * time.Millisecond) {
				id, err := gb.NextID(ctx)
				if err == nil {
					first = id
				} else if !errors.Is(err, snowflake.ErrClockBackwards) {
					t.Fatal(err)
				}
			}
			if first <= lastA {
				t.Fatalf("B's first ID %d is not above A's last %d", first, lastA)
			}
			pa, _ := ga.Decode(lastA)
			if b.State().FloorUnixMilli < pa.Time.UnixMilli() {
				t.Fatalf("B's high-water floor %d is below A's last ID time %d", b.State().FloorUnixMilli, pa.Time.UnixMilli())
			}
		})
	}
}

// TestRelease_PersistsLastUsedSoRestartNeedNotWait: after a graceful release, the next
// holder starts at once, above the released holder's IDs.
func TestRelease_PersistsLastUsedSoRestartNeedNotWait(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 5*time.Second)
			a, err := s.registry(t, workerid.WithIdentity("auth-5", "")).Claim(ctx, "auth")
			if err != nil {
				t.Fatal(err)
			}
			ga := bound(t, a)
			ids, _ := ga.NextN(ctx, 100)
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := ga.NextID(ctx); !errors.Is(err, snowflake.ErrWorkerLeaseLost) || !errors.Is(a.Err(), workerid.ErrReleased) {
				t.Fatalf("after Release: %v / %v", err, a.Err())
			}
			b := claim(t, s.registry(t, workerid.WithIdentity("auth-5", "")), "auth")
			id, err := bound(t, b).NextID(ctx)
			if err != nil {
				t.Fatalf("first ID after a graceful handover: %v", err)
			}
			if id <= ids[len(ids)-1] {
				t.Fatalf("id %d not above released holder's %d", id, ids[len(ids)-1])
			}
			if b.State().LimitUnixMilli <= b.State().FloorUnixMilli {
				t.Fatalf("reservation %d not above floor %d", b.State().LimitUnixMilli, b.State().FloorUnixMilli)
			}
		})
	}
}

func claimEventually(t *testing.T, reg *workerid.Registry, service string, within time.Duration) *workerid.Lease {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l, err := reg.Claim(ctxT(t, 5*time.Second), service)
		if err == nil {
			t.Cleanup(func() { _ = l.Release(context.Background()) })
			return l
		}
		if !errors.Is(err, workerid.ErrCollision) || time.Now().After(deadline) {
			t.Fatalf("claim: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNew_SecondGeneratorOnALeaseIsRefused: two generators bound to one lease share its
// WorkerID and floor but not their state, and in one millisecond issue the same IDs. The
// second New is refused; the first generator keeps issuing, and Release still persists its
// last-used time.
func TestNew_SecondGeneratorOnALeaseIsRefused(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 5*time.Second)
			l := claim(t, s.registry(t, workerid.WithIdentity("auth-3", ""), workerid.WithoutHeartbeat()), "auth")
			g := bound(t, l)
			_, err := snowflake.New(l.WorkerID(), snowflake.WithLease(l))
			if !errors.Is(err, snowflake.ErrInvalid) || !strings.Contains(err.Error(), "already bound to a generator") {
				t.Fatalf("second New on one lease: %v, want ErrInvalid saying the lease is already bound", err)
			}
			ids, err := g.NextN(ctx, 100)
			if err != nil {
				t.Fatalf("the generator bound first, after a refused second one: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// The next holder starts above the first generator's IDs.
			b := claim(t, s.registry(t, workerid.WithIdentity("auth-3", ""), workerid.WithoutHeartbeat()), "auth")
			id, err := bound(t, b).NextID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if id <= ids[len(ids)-1] {
				t.Fatalf("next holder's id %d not above the first generator's %d", id, ids[len(ids)-1])
			}
		})
	}
}

// TestNew_GeneratorOfAnotherLayoutThanTheRegistrysIsRefused: the high-water mark is in Unix
// ms, but an ID's time is in ms since its generator's epoch and its bits are split by its
// layout, so generators of different layouts on one WorkerID reissue each other's IDs. A
// Registry built WithLayout hands out leases that bind only generators of that layout; one
// without WithLayout binds only generators of the default layout (it used to leave the
// layout to the caller; its ID space is now recorded with the slot, and must be the one
// its generators issue in).
func TestNew_GeneratorOfAnotherLayoutThanTheRegistrysIsRefused(t *testing.T) {
	t.Parallel()
	s := etcdStore(t)
	l := claim(t, s.registry(t, workerid.WithLayout(snowflake.Layout8x13), workerid.WithIdentity("auth-3", ""), workerid.WithoutHeartbeat()), "auth")
	_, err := snowflake.New(l.WorkerID(), snowflake.WithLease(l))
	if !errors.Is(err, snowflake.ErrInvalid) || !strings.Contains(err.Error(), "is for layout 42/8/13, generator has layout 41/10/12") {
		t.Fatalf("New of the default layout on a lease for 42/8/13: %v, want ErrInvalid naming both layouts", err)
	}
	// The refused generator did not bind the lease: one of the registry's layout does.
	g, err := snowflake.New(l.WorkerID(), snowflake.WithLease(l), snowflake.WithLayout(snowflake.Layout8x13))
	if err != nil {
		t.Fatalf("New of the registry's layout after a refused one: %v", err)
	}
	if _, err := g.NextID(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}

	def := claim(t, s.registry(t, workerid.WithIdentity("auth-4", ""), workerid.WithoutHeartbeat()), "auth")
	_, err = snowflake.New(def.WorkerID(), snowflake.WithLease(def), snowflake.WithLayout(snowflake.Layout8x13))
	if !errors.Is(err, snowflake.ErrInvalid) || !strings.Contains(err.Error(), "is for layout 41/10/12, generator has layout 42/8/13") {
		t.Fatalf("New of 42/8/13 on a lease of a Registry without WithLayout: %v, want ErrInvalid naming both layouts", err)
	}
	if _, err := snowflake.New(def.WorkerID(), snowflake.WithLease(def)); err != nil {
		t.Fatalf("New of the default layout on a lease of a Registry without WithLayout: %v", err)
	}
}

// TestNew_GeneratorOfAnotherEpochThanTheRegistrysIsRefused: as for the layout, a lease
// binds only generators of its Registry's epoch (WithEpoch, default snowflake.DefaultEpoch):
// a generator counting from another epoch would issue, above the slot's Unix-ms mark, IDs
// the slot's earlier holders issued. A refused New leaves the lease free for one of the
// Registry's epoch.
func TestNew_GeneratorOfAnotherEpochThanTheRegistrysIsRefused(t *testing.T) {
	t.Parallel()
	later := snowflake.DefaultEpoch.AddDate(1, 0, 0) // 2025-01-01
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			l := claim(t, s.registry(t, workerid.WithEpoch(later), workerid.WithIdentity("auth-3", ""), workerid.WithoutHeartbeat()), "auth")
			if e, ok := l.Epoch(); !ok || !e.Equal(later) {
				t.Fatalf("Lease.Epoch() = %s, %v, want %s", e, ok, later)
			}
			_, err := snowflake.New(l.WorkerID(), snowflake.WithLease(l))
			if !errors.Is(err, snowflake.ErrInvalid) || !strings.Contains(err.Error(), "is for epoch 2025-01-01T00:00:00Z, generator has epoch 2024-01-01T00:00:00Z") {
				t.Fatalf("New of the default epoch on a lease for 2025-01-01: %v, want ErrInvalid naming both epochs", err)
			}
			g, err := snowflake.New(l.WorkerID(), snowflake.WithLease(l), snowflake.WithEpoch(later))
			if err != nil {
				t.Fatalf("New of the registry's epoch after a refused one: %v", err)
			}
			if _, err := g.NextID(ctxT(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}

			def := claim(t, s.registry(t, workerid.WithIdentity("auth-4", ""), workerid.WithoutHeartbeat()), "auth")
			_, err = snowflake.New(def.WorkerID(), snowflake.WithLease(def), snowflake.WithEpoch(later))
			if !errors.Is(err, snowflake.ErrInvalid) || !strings.Contains(err.Error(), "is for epoch 2024-01-01T00:00:00Z, generator has epoch 2025-01-01T00:00:00Z") {
				t.Fatalf("New of epoch 2025-01-01 on a lease of a Registry without WithEpoch: %v, want ErrInvalid naming both epochs", err)
			}
			if _, err := snowflake.New(def.WorkerID(), snowflake.WithLease(def)); err != nil {
				t.Fatalf("New of the default epoch on a lease of a Registry without WithEpoch: %v", err)
			}
		})
	}
}

// TestWithEpoch_AnEpochNoGeneratorCanUseIsRefused: bad input is a clear error naming the
// problem, checked as snowflake.New checks a generator's epoch, when the Registry is
// built rather than at the first Claim.
func TestWithEpoch_AnEpochNoGeneratorCanUseIsRefused(t *testing.T) {
	t.Parallel()
	s := redisStore(t)
	short := snowflake.Layout{TimeBits: 32, WorkerBits: 10, SequenceBits: 21} // 49 days
	for _, tc := range []struct {
		name   string
		epoch  time.Time
		layout snowflake.Layout
		want   string
	}{
		{"in the future", time.Now().Add(time.Hour).Truncate(time.Millisecond), snowflake.DefaultLayout, "is in the future"},
		{"zero", time.Time{}, snowflake.DefaultLayout, "epoch is the zero time"},
		{"before 1970", time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC), snowflake.DefaultLayout, "is before 1970"},
		{"not a whole millisecond", snowflake.DefaultEpoch.Add(time.Microsecond), snowflake.DefaultLayout, "is not a whole millisecond"},
		{"lifetime over", time.Unix(0, 0), short, "layout 32/10/21 ended at 1970-02-19T17:02:47Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redisClient(s.addr)
			defer c.Close()
			_, err := workerid.NewRedis(c, workerid.WithEpoch(tc.epoch), workerid.WithLayout(tc.layout))
			if !errors.Is(err, workerid.ErrInvalid) || !strings.Contains(err.Error(), "WithEpoch") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("WithEpoch(%s): %v, want ErrInvalid naming WithEpoch and %q", tc.epoch, err, tc.want)
			}
		})
	}
	c := redisClient(s.addr)
	defer c.Close()
	if _, err := workerid.NewRedis(c, workerid.WithEpoch(time.Unix(0, 0)), workerid.WithLayout(short)); !errors.Is(err, snowflake.ErrLifetimeOver) {
		t.Fatalf("an epoch whose lifetime is over: %v, want snowflake.ErrLifetimeOver", err)
	}
}
