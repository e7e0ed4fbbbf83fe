package snowflake

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestNew_RefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		worker int64
		opts   []Option
		want   string
	}{
		{"worker above range", 1024, nil, "worker id 1024 out of range [0, 1023]"},
		{"negative worker", -1, nil, "worker id -1 out of range"},
		{"worker above 8-bit range", 256, []Option{WithLayout(Layout8x13)}, "out of range [0, 255]"},
		{"widths do not sum to 63", 1, []Option{WithLayout(Layout{TimeBits: 40, WorkerBits: 10, SequenceBits: 12})}, "sum to 62, want 63"},
		{"epoch in the future", 1, []Option{WithEpoch(time.Now().Add(time.Hour).Truncate(time.Millisecond))}, "is in the future"},
		{"epoch not whole ms", 1, []Option{WithEpoch(DefaultEpoch.Add(time.Microsecond))}, "not a whole millisecond"},
		{"zero epoch", 1, []Option{WithEpoch(time.Time{})}, "epoch is the zero time"},
		{"negative max wait", 1, []Option{WithMaxWait(-time.Millisecond)}, "negative max wait"},
		{"lease for another worker", 1, []Option{WithLease(&fakeLease{id: 2})}, "lease is for worker id 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.worker, tc.opts...)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
	if _, err := New(1, WithEpoch(time.Date(1950, 1, 1, 0, 0, 0, 0, time.UTC))); !errors.Is(err, ErrInvalid) {
		t.Fatalf("epoch before 1970: %v, want ErrInvalid", err)
	}
	short := Layout{TimeBits: 32, WorkerBits: 10, SequenceBits: 21} // 49 days
	_, err := New(1, WithLayout(short), WithEpoch(time.Now().AddDate(-1, 0, 0).Truncate(time.Second)))
	if !errors.Is(err, ErrLifetimeOver) {
		t.Fatalf("epoch whose lifetime is over: %v, want ErrLifetimeOver", err)
	}
}

func TestNextN_RefusesNonPositiveN(t *testing.T) {
	g := mustNew(t, 1)
	for _, n := range []int{0, -1} {
		if _, err := g.NextN(context.Background(), n); !errors.Is(err, ErrInvalid) {
			t.Fatalf("NextN(%d) = %v, want ErrInvalid", n, err)
		}
	}
	if err := g.Fill(context.Background(), nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Fill(nil) = %v, want ErrInvalid", err)
	}
}

func mustNew(t testing.TB, worker int64, opts ...Option) *Generator {
	t.Helper()
	g, err := New(worker, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestNextID_IncreasesAndDecodesToNow(t *testing.T) {
	g := mustNew(t, 7)
	ctx := context.Background()
	before := time.Now().Truncate(time.Millisecond)
	var prev int64
	for range 20000 { // several exhausted milliseconds
		id, err := g.NextID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if id <= prev {
			t.Fatalf("id %d after %d", id, prev)
		}
		prev = id
	}
	p, err := g.Decode(prev)
	if err != nil {
		t.Fatal(err)
	}
	if p.Worker != 7 || p.Time.Before(before) || p.Time.After(time.Now()) {
		t.Fatalf("Decode = %+v, want worker 7 between %s and now", p, before)
	}
	if !g.LastTime().Equal(p.Time) {
		t.Fatalf("LastTime %s != decoded %s", g.LastTime(), p.Time)
	}
}

func TestFill_IDsAreConsecutiveAndIncreasing(t *testing.T) {
	g := mustNew(t, 3)
	ids, err := g.NextN(context.Background(), 10000)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("ids[%d]=%d <= ids[%d]=%d", i, ids[i], i-1, ids[i-1])
		}
	}
	next, err := g.NextID(context.Background())
	if err != nil || next <= ids[len(ids)-1] {
		t.Fatalf("NextID after batch = %d, %v", next, err)
	}
}

func TestNextID_WaitsOutSmallBackwardsStep(t *testing.T) {
	clk := &steppingClock{}
	var waited, refused atomic.Int64
	// MaxWait 200ms and a 100ms step: the sleep below may overrun on a loaded machine
	// without the clock catching up.
	g := mustNew(t, 1, WithClock(clk), WithMaxWait(200*time.Millisecond), WithHooks(Hooks{ClockBackwards: func(_ time.Duration, r bool) {
		if r {
			refused.Add(1)
		} else {
			waited.Add(1)
		}
	}}))
	ctx := context.Background()
	first, err := g.NextID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(-100 * time.Millisecond)
	time.Sleep(2 * time.Millisecond) // past the ms boundary, so the step is seen
	second, err := g.NextID(ctx)
	if err != nil {
		t.Fatalf("100ms step with MaxWait 200ms: %v, want a wait", err)
	}
	if second <= first || waited.Load() == 0 || refused.Load() != 0 {
		t.Fatalf("first %d second %d waited %d refused %d", first, second, waited.Load(), refused.Load())
	}
}

func TestNextID_RefusesLargeBackwardsStepWithOffset(t *testing.T) {
	clk := &steppingClock{}
	g := mustNew(t, 1, WithClock(clk))
	ctx := context.Background()
	if _, err := g.NextID(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Step(-time.Second)
	time.Sleep(2 * time.Millisecond)
	_, err := g.NextID(ctx)
	var cbe *ClockBackwardsError
	if !errors.Is(err, ErrClockBackwards) || !errors.As(err, &cbe) {
		t.Fatalf("1s step: %v, want *ClockBackwardsError", err)
	}
	if cbe.Offset < 900*time.Millisecond || cbe.Offset > time.Second {
		t.Fatalf("Offset = %s, want ~1s", cbe.Offset)
	}
	clk.Step(time.Second)
	if _, err := g.NextID(ctx); err != nil {
		t.Fatalf("after the clock came back: %v", err)
	}
}

func TestNextID_WaitHonoursContext(t *testing.T) {
	clk := &steppingClock{}
	g := mustNew(t, 1, WithClock(clk), WithMaxWait(time.Second))
	if _, err := g.NextID(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Step(-500 * time.Millisecond)
	time.Sleep(2 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := g.NextID(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Fatalf("returned after %s, want about the 20ms deadline", d)
	}
}

func TestNextID_SequenceExhaustionWaitsForNextMillisecond(t *testing.T) {
	// 128 IDs per ms: a millisecond's sequence runs out long before the millisecond does,
	// even under the race detector.
	var exhausted atomic.Int64
	g := mustNew(t, 1, WithLayout(LayoutJSSafe), WithHooks(Hooks{SequenceExhausted: func() { exhausted.Add(1) }}))
	ctx := context.Background()
	var ids []int64
	batch, err := g.NextN(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, batch...)
	for range 1000 {
		id, err := g.NextID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	ms := map[int64]int{}
	for _, id := range ids {
		p, _ := g.Decode(id)
		ms[p.Time.UnixMilli()]++
	}
	if len(ms) < 2000/128 || exhausted.Load() == 0 {
		t.Fatalf("%d IDs in %d ms, exhausted %d times", len(ids), len(ms), exhausted.Load())
	}
	for m, n := range ms {
		if n > 128 {
			t.Fatalf("%d IDs in ms %d, the layout allows 128", n, m)
		}
	}
}

func validLease(id int64) *fakeLease {
	l := &fakeLease{id: id}
	l.set(LeaseState{ValidUntil: time.Now().Add(time.Hour)})
	return l
}

func TestLease_RefusesOnceDeadlinePassedOrLost(t *testing.T) {
	l := validLease(5)
	g := mustNew(t, 5, WithLease(l))
	ctx := context.Background()
	if _, err := g.NextID(ctx); err != nil {
		t.Fatal(err)
	}
	l.set(LeaseState{ValidUntil: time.Now().Add(-time.Millisecond)})
	if _, err := g.NextID(ctx); !errors.Is(err, ErrWorkerLeaseLost) {
		t.Fatalf("past deadline: %v, want ErrWorkerLeaseLost", err)
	}
	if err := g.Fill(ctx, make([]int64, 10)); !errors.Is(err, ErrWorkerLeaseLost) {
		t.Fatalf("Fill past deadline: %v, want ErrWorkerLeaseLost", err)
	}
	lost := errors.New("taken over")
	l.set(LeaseState{ValidUntil: time.Now().Add(time.Hour), Err: lost})
	if _, err := g.NextID(ctx); !errors.Is(err, ErrWorkerLeaseLost) || !errors.Is(err, lost) {
		t.Fatalf("lost: %v", err)
	}
	if l.last == nil || l.last().IsZero() {
		t.Fatal("generator did not hand the lease its last-used time")
	}
}

func TestLease_NeverIssuesAtOrBelowHighWaterMark(t *testing.T) {
	hw := time.Now().Add(3 * time.Millisecond).UnixMilli() // a previous holder's clock ran ahead
	l := validLease(5)
	l.set(LeaseState{ValidUntil: time.Now().Add(time.Hour), FloorUnixMilli: hw})
	g := mustNew(t, 5, WithLease(l))
	ids, err := g.NextN(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if p, _ := g.Decode(id); p.Time.UnixMilli() <= hw {
			t.Fatalf("id %d at %d, high-water mark %d", id, p.Time.UnixMilli(), hw)
		}
	}
	// A high-water mark further ahead than MaxWait is refused, not waited out.
	l.set(LeaseState{ValidUntil: time.Now().Add(time.Hour), FloorUnixMilli: time.Now().Add(time.Minute).UnixMilli()})
	if _, err := g.NextID(context.Background()); !errors.Is(err, ErrClockBackwards) {
		t.Fatalf("floor a minute ahead: %v, want ErrClockBackwards", err)
	}
}

func TestLease_RefusesPastReservedLimit(t *testing.T) {
	l := validLease(5)
	l.set(LeaseState{ValidUntil: time.Now().Add(time.Hour), LimitUnixMilli: time.Now().Add(-time.Second).UnixMilli()})
	g := mustNew(t, 5, WithLease(l))
	if _, err := g.NextID(context.Background()); !errors.Is(err, ErrWorkerLeaseLost) {
		t.Fatalf("clock past the reservation: %v, want ErrWorkerLeaseLost", err)
	}
}

// layoutFakeLease is a fakeLease from a registry for one layout.
type layoutFakeLease struct {
	*fakeLease
	layout Layout
}

func (l layoutFakeLease) Layout() (Layout, bool) { return l.layout, true }

func TestNew_LeaseForALayoutBindsOnlyThatLayout(t *testing.T) {
	l := layoutFakeLease{validLease(5), Layout{TimeBits: 41, WorkerBits: 10, SequenceBits: 12, Bits: 63}}
	if _, err := New(5, WithLease(l), WithLayout(Layout8x13)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("generator of 42/8/13 on a lease for 41/10/12: %v, want ErrInvalid", err)
	}
	mustNew(t, 5, WithLease(l)) // Bits 63 is the default layout's zero Bits
}

// epochFakeLease is a fakeLease from a registry for one epoch.
type epochFakeLease struct {
	*fakeLease
	epoch time.Time
}

func (l epochFakeLease) Epoch() (time.Time, bool) { return l.epoch, true }

// TestNew_LeaseForAnEpochBindsOnlyThatEpoch: a lease's high-water mark is a Unix
// millisecond, an ID's time counts from its generator's epoch, so a generator of another
// epoch than the lease's registry records would issue, above the mark, IDs the slot's
// earlier holders issued. New refuses it, before binding the lease.
func TestNew_LeaseForAnEpochBindsOnlyThatEpoch(t *testing.T) {
	later := DefaultEpoch.AddDate(0, 0, 1)
	l := epochFakeLease{validLease(5), later}
	_, err := New(5, WithLease(l))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "is for epoch 2024-01-02T00:00:00Z, generator has epoch 2024-01-01T00:00:00Z") {
		t.Fatalf("generator of the default epoch on a lease for a day later: %v, want ErrInvalid naming both epochs", err)
	}
	if l.last != nil {
		t.Fatal("the refused generator registered its last-used time with the lease")
	}
	mustNew(t, 5, WithLease(l), WithEpoch(later.In(time.FixedZone("UTC+2", 2*3600)))) // one instant, another zone
}
