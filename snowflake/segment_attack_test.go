package snowflake_test

// Attacks on Segment's guarantees: buffers recycled to the filler are never observable
// through Next; IDs are handed out unique and in generation order; a Segment bound to a real
// WorkerID lease (Redis or etcd, started by internal/testenv) refuses once the lease could
// have expired, even with IDs buffered, and whoever holds the slot next never issues an ID at
// or below one the Segment handed out; Close returns every caller promptly and leaks nothing.
//
// This file is package snowflake_test, not package snowflake like segment_test.go: the lease
// attacks need package workerid, which imports snowflake, and an in-package test importing it
// would be an import cycle.
//
// Verdicts never depend on timing. Call order is taken from tickets drawn from one atomic
// counter before and after each Next; "the lease could have expired" is judged against the
// lease's own ValidUntil read after the call returned; blocked callers are found in the
// goroutine dump. Waits are bounded polls for an event (a liveness limit), never a stand-in
// for synchronisation.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// ---- recording calls ----

// call is one Segment.Next call as the attack saw it.
type call struct {
	startT, endT int64     // tickets drawn just before and just after the call
	start        time.Time // time.Now (monotonic) just before the call
	id           int64
	err          error
	validAfter   time.Time // the lease's ValidUntil read just after the call returned
}

// harness hands out the tickets that order calls in real time: if a.endT < b.startT, call a
// returned before call b began.
type harness struct {
	tick  atomic.Int64
	lease snowflake.WorkerLease // nil without a lease
}

func (h *harness) next(ctx context.Context, s *snowflake.Segment) call {
	c := call{start: time.Now()}
	c.startT = h.tick.Add(1)
	c.id, c.err = s.Next(ctx)
	c.endT = h.tick.Add(1)
	if h.lease != nil {
		c.validAfter = h.lease.State().ValidUntil
	}
	return c
}

// mark returns a ticket: a call with startT > mark began after mark was drawn.
func (h *harness) mark() int64 { return h.tick.Add(1) }

// crowd is goroutines calling Next on one Segment in a loop.
type crowd struct {
	perG   [][]call // goroutine i appends to perG[i]; read only after halt
	made   atomic.Int64
	handed atomic.Int64 // calls that returned an ID
	failed atomic.Int64 // calls that returned an error
	stop   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

// startCrowd starts n goroutines calling s.Next with a background context. After an error
// a goroutine goes on only if retry says so. With pace > 0 a goroutine waits for a 1 ms tick
// after every pace calls: that bounds how many calls are recorded while a test waits for a
// server; it synchronises nothing, and no verdict depends on it.
func startCrowd(h *harness, s *snowflake.Segment, n, pace int, retry func(error) bool) *crowd {
	c := &crowd{perG: make([][]call, n), stop: make(chan struct{})}
	for i := range n {
		c.wg.Go(func() {
			var tick <-chan time.Time
			if pace > 0 {
				tk := time.NewTicker(time.Millisecond)
				defer tk.Stop()
				tick = tk.C
			}
			for k := 1; ; k++ {
				select {
				case <-c.stop:
					return
				default:
				}
				r := h.next(context.Background(), s)
				c.perG[i] = append(c.perG[i], r)
				c.made.Add(1)
				if r.err == nil {
					c.handed.Add(1)
				} else if c.failed.Add(1); retry == nil || !retry(r.err) {
					return
				}
				if pace > 0 && k%pace == 0 {
					select {
					case <-c.stop:
						return
					case <-tick:
					}
				}
			}
		})
	}
	return c
}

// halt stops the crowd and waits for every goroutine, failing the test after 10 s.
func (c *crowd) halt(t *testing.T) {
	t.Helper()
	c.once.Do(func() { close(c.stop) })
	waitGroupWithin(t, &c.wg, 10*time.Second, "the crowd's calls to Next to return")
}

func (c *crowd) all() []call { return slices.Concat(c.perG...) }

// leaseRetry: the refusals a lease-bound Segment may answer while the lease is away, or while
// the clock has not yet passed a raised high-water mark.
func leaseRetry(err error) bool {
	return errors.Is(err, snowflake.ErrWorkerLeaseLost) || errors.Is(err, snowflake.ErrClockBackwards)
}

func waitGroupWithin(t *testing.T, wg *sync.WaitGroup, within time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatalf("still waiting after %s for %s; goroutines:\n%s", within, what, segmentGoroutines())
	}
}

func stacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// segmentGoroutines is the part of the goroutine dump that is about Segments.
func segmentGoroutines() string {
	var b strings.Builder
	for _, g := range strings.Split(stacks(), "\n\n") {
		if strings.Contains(g, "snowflake.(*Segment)") {
			b.WriteString(g)
			b.WriteString("\n\n")
		}
	}
	return b.String()
}

// segmentWaiters counts goroutines blocked (in a select or on a channel) inside
// Segment.Next, and reports whether a Segment's filler is asleep waiting for the clock.
func segmentWaiters() (inNext int, fillerAsleep bool) {
	for _, g := range strings.Split(stacks(), "\n\n") {
		header, frames, _ := strings.Cut(g, "\n")
		if !strings.Contains(header, "[select") && !strings.Contains(header, "[chan ") {
			continue
		}
		switch {
		case strings.Contains(frames, "snowflake.(*Segment).Next("):
			inNext++
		case strings.Contains(frames, "snowflake.(*Segment).fill(") && strings.Contains(frames, "snowflake.sleepCtx("):
			fillerAsleep = true
		}
	}
	return inNext, fillerAsleep
}

// ---- checks ----

func handedOut(calls []call) []int64 {
	var ids []int64
	for _, c := range calls {
		if c.err == nil {
			ids = append(ids, c.id)
		}
	}
	return ids
}

// checkUnique fails on an ID handed out twice.
func checkUnique(t *testing.T, what string, ids []int64) {
	t.Helper()
	s := slices.Clone(ids)
	slices.Sort(s)
	dups := 0
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			if dups++; dups <= 5 {
				t.Errorf("%s: ID %d handed out twice", what, s[i])
			}
		}
	}
	if dups > 5 {
		t.Errorf("%s: %d duplicates in all", what, dups)
	}
}

// checkPerCaller: the IDs one goroutine got strictly increase.
func checkPerCaller(t *testing.T, what string, perG [][]call) {
	t.Helper()
	for g, calls := range perG {
		var prev int64 = -1
		for i, c := range calls {
			if c.err != nil {
				continue
			}
			if c.id <= prev {
				t.Errorf("%s: caller %d, call %d: ID %d after %d", what, g, i, c.id, prev)
				break
			}
			prev = c.id
		}
	}
}

// checkGenerationOrder: IDs are handed out in generation order, so when a call returned an
// ID before another call began, the later call's ID is greater.
func checkGenerationOrder(t *testing.T, what string, calls []call) {
	t.Helper()
	var ok []call
	for _, c := range calls {
		if c.err == nil {
			ok = append(ok, c)
		}
	}
	sort.Slice(ok, func(i, j int) bool { return ok[i].endT < ok[j].endT })
	top := make([]int, len(ok)) // index of the greatest ID among ok[:i+1]
	for i := range ok {
		top[i] = i
		if i > 0 && ok[top[i-1]].id > ok[i].id {
			top[i] = top[i-1]
		}
	}
	bad := 0
	for _, b := range ok {
		k := sort.Search(len(ok), func(i int) bool { return ok[i].endT >= b.startT }) - 1
		if k < 0 {
			continue
		}
		if a := ok[top[k]]; a.id >= b.id {
			if bad++; bad <= 5 {
				t.Errorf("%s: a call that returned at ticket %d got ID %d; a call that began later, at ticket %d, got %d",
					what, a.endT, a.id, b.startT, b.id)
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d calls out of generation order in all", what, bad)
	}
}

// checkDecodes: every ID is the generator's: its WorkerID, and a time between from and to
// (a zero or stale buffer slot would decode to another worker or to the epoch).
func checkDecodes(t *testing.T, what string, layout snowflake.Layout, worker int64, from, to time.Time, ids []int64) {
	t.Helper()
	lo, hi := from.Truncate(time.Millisecond).Add(-time.Millisecond), to.Add(time.Millisecond)
	bad := 0
	for _, id := range ids {
		p, err := layout.Decode(snowflake.DefaultEpoch, id)
		if err == nil && p.Worker == worker && !p.Time.Before(lo) && !p.Time.After(hi) {
			continue
		}
		if bad++; bad <= 5 {
			t.Errorf("%s: ID %d decodes to %+v (%v); want worker %d, time in [%s, %s]", what, id, p, err, worker, lo, hi)
		}
	}
}

// checkCalls runs the checks every Segment's calls must pass: no ID handed out twice, each
// caller's IDs strictly increase, and IDs came out in generation order. perG holds each
// caller's calls on one Segment.
func checkCalls(t *testing.T, what string, perG [][]call) {
	t.Helper()
	all := slices.Concat(perG...)
	checkUnique(t, what, handedOut(all))
	checkPerCaller(t, what, perG)
	checkGenerationOrder(t, what, all)
}

func maxOf(ids []int64) int64 {
	if len(ids) == 0 {
		return math.MinInt64
	}
	return slices.Max(ids)
}

func minOf(ids []int64) int64 {
	if len(ids) == 0 {
		return math.MaxInt64
	}
	return slices.Min(ids)
}

// ---- building Generators and Segments ----

func newGenerator(t *testing.T, worker int64, opts ...snowflake.Option) *snowflake.Generator {
	t.Helper()
	g, err := snowflake.New(worker, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// newSegment returns a Segment of size on g, closed when the test ends.
func newSegment(t *testing.T, g *snowflake.Generator, size int) *snowflake.Segment {
	t.Helper()
	s, err := snowflake.NewSegment(g, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// ---- guarantees 1 and 2: recycled buffers, uniqueness, order (no server) ----

// seq16 allows 16 IDs per millisecond, so the filler runs out of sequence all the time and
// waits for the clock while callers wait for it.
var seq16 = snowflake.Layout{TimeBits: 41, WorkerBits: 18, SequenceBits: 4}

// TestSegmentAttack_RecycledBuffersNeverObservable: tiny buffers (one ID and up) make
// every few IDs a buffer swap and a recycled array being refilled by the filler while the
// other callers pop. Two Segments share the generator with a goroutine calling NextID and
// NextN directly; some Next calls come with a context already cancelled or one that ends
// while waiting for the filler, so the refill lock is abandoned mid-wait. No ID may be handed
// out twice (across both Segments and the direct calls), none may come from an unfilled or
// refilled slot (each decodes to the worker and a plausible time), each caller's IDs
// strictly increase, and each Segment hands IDs out in generation order.
func TestSegmentAttack_RecycledBuffersNeverObservable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout snowflake.Layout
		size   int
		per    int
	}{
		{"seq16/size1", seq16, 1, 150},
		{"seq16/size2", seq16, 2, 150},
		{"seq16/size3", seq16, 3, 200},
		{"seq16/size7", seq16, 7, 300},
		{"default/size1", snowflake.DefaultLayout, 1, 1500},
		{"default/size2", snowflake.DefaultLayout, 2, 1500},
		{"default/size5", snowflake.DefaultLayout, 5, 2000},
		{"default/size64", snowflake.DefaultLayout, 64, 4000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const worker = 3
			from := time.Now()
			g := newGenerator(t, worker, snowflake.WithLayout(tc.layout))
			a, b := newSegment(t, g, tc.size), newSegment(t, g, tc.size+1)
			ha, hb := &harness{}, &harness{}
			perA, perB := make([][]call, 6), make([][]call, 2)
			var direct []int64
			var wg sync.WaitGroup
			take := func(h *harness, s *snowflake.Segment, out *[]call, seed int) {
				cancelled, cancel := context.WithCancel(context.Background())
				cancel()
				for k, got := seed, 0; got < tc.per; k++ {
					var r call
					switch {
					case k%7 == 0: // abandons the refill wait at once, or pops anyway
						r = h.next(cancelled, s)
						if r.err != nil && !errors.Is(r.err, context.Canceled) {
							t.Errorf("Next with a cancelled context: %v", r.err)
							return
						}
					case k%13 == 0: // may end while waiting for the filler
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Microsecond)
						r = h.next(ctx, s)
						cancel()
						if r.err != nil && !errors.Is(r.err, context.DeadlineExceeded) {
							t.Errorf("Next with a deadline: %v", r.err)
							return
						}
					default:
						r = h.next(context.Background(), s)
						if r.err != nil {
							t.Errorf("Next: %v", r.err)
							return
						}
					}
					*out = append(*out, r)
					if r.err == nil {
						got++
					}
				}
			}
			for i := range perA {
				wg.Go(func() { take(ha, a, &perA[i], i) })
			}
			for i := range perB {
				wg.Go(func() { take(hb, b, &perB[i], 100+i) })
			}
			wg.Go(func() {
				ctx := context.Background()
				for len(direct) < tc.per {
					if len(direct)%2 == 0 {
						id, err := g.NextID(ctx)
						if err != nil {
							t.Errorf("NextID: %v", err)
							return
						}
						direct = append(direct, id)
						continue
					}
					ids, err := g.NextN(ctx, 3)
					if err != nil {
						t.Errorf("NextN: %v", err)
						return
					}
					direct = append(direct, ids...)
				}
			})
			waitGroupWithin(t, &wg, 30*time.Second, "the callers")
			to := time.Now()
			callsA, callsB := slices.Concat(perA...), slices.Concat(perB...)
			idsA, idsB := handedOut(callsA), handedOut(callsB)
			all := slices.Concat(idsA, idsB, direct)
			checkUnique(t, "both Segments and the direct calls", all)
			checkPerCaller(t, "segment a", perA)
			checkPerCaller(t, "segment b", perB)
			checkPerCaller(t, "direct", [][]call{func() []call {
				cs := make([]call, len(direct))
				for i, id := range direct {
					cs[i] = call{id: id}
				}
				return cs
			}()})
			checkGenerationOrder(t, "segment a", callsA)
			checkGenerationOrder(t, "segment b", callsB)
			checkDecodes(t, "all IDs", tc.layout, worker, from, to, all)
			t.Logf("segment a: %d calls, %d IDs; segment b: %d calls, %d IDs; direct %d IDs",
				len(callsA), len(idsA), len(callsB), len(idsB), len(direct))
		})
	}
}

// ---- guarantee 4: Close with callers blocked and popping (no server) ----

// steppedClock is the system clock, stepped back by back.
type steppedClock struct{ back atomic.Int64 }

func (c *steppedClock) Wall() time.Time          { return time.Now().Add(-time.Duration(c.back.Load())) }
func (*steppedClock) Mono() time.Duration        { return snowflake.SystemClock{}.Mono() }
func (c *steppedClock) stepBack(d time.Duration) { c.back.Store(int64(d)) }

// TestSegmentAttack_CloseReturnsEveryCaller: Close with callers blocked in Next on an empty
// buffer (the filler asleep for a minute behind a clock stepped back), with callers getting a
// refusing filler's errors, and with callers popping mid-stream. Every call returns within
// 10 s with an ID, ErrSegmentClosed or its own context's error; a call that begins after Close
// returned gets ErrSegmentClosed; IDs stay unique and ordered; no goroutine is left behind.
//
// Not parallel: goleak.VerifyNone sees every goroutine of the process.
func TestSegmentAttack_CloseReturnsEveryCaller(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	t.Run("filler-asleep", func(t *testing.T) {
		clk := &steppedClock{}
		g := newGenerator(t, 4, snowflake.WithLayout(seq16), snowflake.WithClock(clk), snowflake.WithMaxWait(time.Hour))
		s := newSegment(t, g, 4)
		const n, withCtx = 16, 4 // the first withCtx callers have contexts cancelled before Close
		h := &harness{}
		per := make([][]call, n)
		cancels := make([]context.CancelFunc, withCtx)
		var handed atomic.Int64
		var wgCtx, wgRest sync.WaitGroup
		for i := range n {
			ctx := context.Background()
			wg := &wgRest
			if i < withCtx {
				ctx, cancels[i] = context.WithCancel(ctx)
				defer cancels[i]()
				wg = &wgCtx
			}
			wg.Go(func() {
				for {
					r := h.next(ctx, s)
					per[i] = append(per[i], r)
					if r.err != nil {
						return
					}
					handed.Add(1)
				}
			})
		}
		testenv.WaitFor(t, 10*time.Second, "1000 IDs handed out", func() bool { return handed.Load() >= 1000 })
		clk.stepBack(time.Minute) // the filler's next clock read waits a minute (MaxWait is an hour)
		testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("all %d callers blocked in Next and the filler asleep", n), func() bool {
			inNext, asleep := segmentWaiters()
			return inNext >= n && asleep
		})
		before := handed.Load()
		for _, cancel := range cancels {
			cancel()
		}
		waitGroupWithin(t, &wgCtx, 10*time.Second, "callers whose context was cancelled")
		var closers sync.WaitGroup
		for range 2 {
			closers.Go(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
		}
		waitGroupWithin(t, &closers, 10*time.Second, "Close")
		closedT := h.mark()
		waitGroupWithin(t, &wgRest, 10*time.Second, "blocked callers after Close")
		if r := h.next(context.Background(), s); !errors.Is(r.err, snowflake.ErrSegmentClosed) {
			t.Errorf("Next after Close: %d, %v; want ErrSegmentClosed", r.id, r.err)
		}
		for i, calls := range per {
			last := calls[len(calls)-1]
			want := snowflake.ErrSegmentClosed
			if i < withCtx {
				want = context.Canceled
			}
			if !errors.Is(last.err, want) {
				t.Errorf("caller %d (blocked in Next): returned %d, %v; want %v", i, last.id, last.err, want)
			}
			if last.startT > closedT && !errors.Is(last.err, snowflake.ErrSegmentClosed) {
				t.Errorf("caller %d began after Close returned and got %d, %v", i, last.id, last.err)
			}
		}
		if after := handed.Load(); after != before {
			t.Errorf("%d IDs handed out while the filler was asleep and every caller blocked", after-before)
		}
		checkCalls(t, "filler-asleep", per)
	})

	t.Run("filler-refusing", func(t *testing.T) {
		clk := &steppedClock{}
		g := newGenerator(t, 4, snowflake.WithLayout(seq16), snowflake.WithClock(clk)) // MaxWait 5ms
		s := newSegment(t, g, 3)
		h := &harness{}
		var refusals atomic.Int64
		c := startCrowd(h, s, 12, 0, func(err error) bool {
			if errors.Is(err, snowflake.ErrClockBackwards) {
				refusals.Add(1)
				return true
			}
			return false
		})
		testenv.WaitFor(t, 10*time.Second, "500 IDs handed out", func() bool { return c.handed.Load() >= 500 })
		clk.stepBack(time.Minute) // every fill now fails with *ClockBackwardsError
		testenv.WaitFor(t, 10*time.Second, "50 refusals", func() bool { return refusals.Load() >= 50 })
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		closedT := h.mark()
		waitGroupWithin(t, &c.wg, 10*time.Second, "callers after Close")
		c.halt(t)
		for i, calls := range c.perG {
			for j, r := range calls {
				switch {
				case r.startT > closedT && !errors.Is(r.err, snowflake.ErrSegmentClosed):
					t.Errorf("caller %d began a call after Close returned and got %d, %v", i, r.id, r.err)
				case j == len(calls)-1 && !errors.Is(r.err, snowflake.ErrSegmentClosed):
					t.Errorf("caller %d's last call: %d, %v; want ErrSegmentClosed", i, r.id, r.err)
				}
			}
		}
		checkCalls(t, "filler-refusing", c.perG)
	})

	t.Run("mid-stream", func(t *testing.T) {
		for round := range 12 {
			g := newGenerator(t, 4, snowflake.WithLayout(seq16))
			s := newSegment(t, g, 1+round%3)
			h := &harness{}
			c := startCrowd(h, s, 12, 0, nil)
			target := int64(10 + 37*round)
			testenv.WaitFor(t, 10*time.Second, "IDs handed out", func() bool { return c.handed.Load() >= target })
			var closers sync.WaitGroup
			for range 1 + round%2 {
				closers.Go(func() { _ = s.Close() })
			}
			waitGroupWithin(t, &closers, 10*time.Second, "Close")
			closedT := h.mark()
			waitGroupWithin(t, &c.wg, 10*time.Second, "callers after Close")
			c.halt(t)
			for i, calls := range c.perG {
				for j, r := range calls {
					switch {
					case r.startT > closedT && !errors.Is(r.err, snowflake.ErrSegmentClosed):
						t.Errorf("round %d: caller %d began a call after Close returned and got %d, %v", round, i, r.id, r.err)
					case r.err != nil && (j != len(calls)-1 || !errors.Is(r.err, snowflake.ErrSegmentClosed)):
						t.Errorf("round %d: caller %d, call %d: %v", round, i, j, r.err)
					case j == len(calls)-1 && r.err == nil:
						t.Errorf("round %d: caller %d stopped without an error", round, i)
					}
				}
			}
			checkCalls(t, fmt.Sprintf("round %d", round), c.perG)
		}
	})
}

// ---- guarantee 3: a Segment bound to a real WorkerID lease ----

// attackTTL is the lease TTL: renewals every 333 ms, ValidUntil 900 ms after a renewal was
// sent. etcd grants at least 1 s on testenv's timings.
const attackTTL = time.Second

// leaseStore is a real Redis or etcd for the lease attacks.
type leaseStore struct {
	hostport string // the server's client address, for a Proxy
	// registryAt returns a Registry on a client of its own dialling hostport (the server's
	// or a Proxy's), as one process has it, and a func that closes that client, as a crash
	// would.
	registryAt func(t *testing.T, hostport, podIP string) (*workerid.Registry, func())
	// dropSlot removes the slot key behind its holder's back: DEL on Redis, revoking the
	// key's etcd lease on etcd.
	dropSlot func(t *testing.T, worker int64)
	// slotHeld reports whether the slot key exists.
	slotHeld func(t *testing.T, worker int64) bool
	// down makes the store unreachable without losing data (Redis: SIGSTOP; etcd: stop the
	// member), up undoes it.
	down, up func(t *testing.T)
}

// process is a Registry on a client of its own, straight to the server.
func (st leaseStore) process(t *testing.T, podIP string) (*workerid.Registry, func()) {
	return st.registryAt(t, st.hostport, podIP)
}

var leaseStores = []struct {
	name string
	new  func(t *testing.T) leaseStore
}{{"redis", redisLeaseStore}, {"etcd", etcdLeaseStore}}

func registryOptions(podIP string) []workerid.Option {
	// Pod auth-5 prefers WorkerID 5; every process of a test competes for it.
	return []workerid.Option{workerid.WithTTL(attackTTL), workerid.WithIdentity("auth-5", podIP)}
}

func redisLeaseStore(t *testing.T) leaseStore {
	r := testenv.NewRedis(t)
	admin := testenv.NewRedisClient(t, r.Addr())
	return leaseStore{
		hostport: r.Addr(),
		registryAt: func(t *testing.T, hostport, podIP string) (*workerid.Registry, func()) {
			// Short timeouts and no retries, as in workerid's tests: a stopped server is
			// noticed within a renewal.
			c := redis.NewClient(&redis.Options{Addr: hostport, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
				ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			reg, err := workerid.NewRedis(c, registryOptions(podIP)...)
			if err != nil {
				t.Fatal(err)
			}
			return reg, func() { _ = c.Close() }
		},
		dropSlot: func(t *testing.T, worker int64) {
			key := workerid.SlotKey(workerid.DefaultKeyPrefix, worker)
			if n, err := admin.Del(context.Background(), key).Result(); err != nil || n != 1 {
				t.Fatalf("DEL %s: %d, %v", key, n, err)
			}
		},
		slotHeld: func(t *testing.T, worker int64) bool {
			n, err := admin.Exists(context.Background(), workerid.SlotKey(workerid.DefaultKeyPrefix, worker)).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		},
		down: func(t *testing.T) {
			if err := r.Pause(); err != nil {
				t.Fatal(err)
			}
		},
		up: func(t *testing.T) {
			if err := r.Resume(); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func etcdLeaseStore(t *testing.T) leaseStore {
	e := testenv.NewEtcd(t)
	admin := e.Client(t)
	slot := func(t *testing.T, worker int64) *clientv3.GetResponse {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := admin.Get(ctx, workerid.SlotKey(workerid.DefaultKeyPrefix, worker))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	return leaseStore{
		hostport: strings.TrimPrefix(e.Endpoint(), "http://"),
		registryAt: func(t *testing.T, hostport, podIP string) (*workerid.Registry, func()) {
			c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + hostport}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			reg, err := workerid.NewEtcd(c, registryOptions(podIP)...)
			if err != nil {
				t.Fatal(err)
			}
			return reg, func() { _ = c.Close() }
		},
		dropSlot: func(t *testing.T, worker int64) {
			resp := slot(t, worker)
			if len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
				t.Fatalf("slot %d: %d keys", worker, len(resp.Kvs))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := admin.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
				t.Fatalf("revoke the lease of slot %d: %v", worker, err)
			}
		},
		slotHeld: func(t *testing.T, worker int64) bool { return len(slot(t, worker).Kvs) == 1 },
		down:     func(*testing.T) { e.Stop() },
		up: func(t *testing.T) {
			if err := e.Restart(); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// claimWithin claims the slot, retrying while another owner holds it, and releases the
// lease when the test ends.
func claimWithin(t *testing.T, reg *workerid.Registry, within time.Duration) *workerid.Lease {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		l, err := reg.Claim(ctx, "auth")
		cancel()
		if err == nil {
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_ = l.Release(ctx)
			})
			return l
		}
		if !errors.Is(err, workerid.ErrCollision) || time.Now().After(deadline) {
			t.Fatalf("claim: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling for the slot to expire, with a deadline
	}
}

// bind returns a Generator bound to l and a Segment of size on it, closed when the test ends.
func bind(t *testing.T, l *workerid.Lease, size int) (*snowflake.Generator, *snowflake.Segment) {
	t.Helper()
	g := newGenerator(t, l.WorkerID(), snowflake.WithLease(l))
	return g, newSegment(t, g, size)
}

// checkRefusedOnceExpired: a call that began at or after the lease's ValidUntil (as known
// once it returned) hands out nothing. ValidUntil only moves forward while a lease runs, so
// a later read can only excuse a call, never wrongly blame it; a lease that has ended reads
// zero and is judged by the caller's ticket checks instead.
func checkRefusedOnceExpired(t *testing.T, what string, calls []call) {
	t.Helper()
	bad := 0
	for _, c := range calls {
		if c.err != nil || c.validAfter.IsZero() || c.start.Before(c.validAfter) {
			continue
		}
		if bad++; bad <= 5 {
			t.Errorf("%s: ID %d handed out by a call that began at %s, %s after the lease's ValidUntil %s",
				what, c.id, c.start.Format(time.StampMicro), c.start.Sub(c.validAfter), c.validAfter.Format(time.StampMicro))
		}
	}
}

// checkErrors: every error a lease-bound Segment answered is a lease refusal (or a raised
// high-water mark the clock has not passed).
func checkErrors(t *testing.T, what string, calls []call) {
	t.Helper()
	for _, c := range calls {
		if c.err != nil && !leaseRetry(c.err) {
			t.Errorf("%s: unexpected error %v", what, c.err)
			return
		}
	}
}

// checkHolder runs the checks every lease holder's Segment must pass: it answered only lease
// refusals (checkErrors), each caller's IDs strictly increase, and IDs came out in
// generation order. perG is the holder's crowd; calls are all its recorded calls. Uniqueness
// is checked across holders (checkSuccession, checkUnique).
func checkHolder(t *testing.T, what string, perG [][]call, calls []call) {
	t.Helper()
	checkErrors(t, what, calls)
	checkPerCaller(t, what, perG)
	checkGenerationOrder(t, what, calls)
}

// checkSuccession: the later holder of the slot handed out only IDs above every ID the
// earlier holder handed out, so none of them was handed out twice.
func checkSuccession(t *testing.T, earlier, later string, idsEarlier, idsLater []int64) {
	t.Helper()
	if lo, hi := minOf(idsLater), maxOf(idsEarlier); lo <= hi {
		t.Errorf("%s handed out %d, at or below %d, which %s handed out", later, lo, hi, earlier)
	}
	checkUnique(t, earlier+" and "+later, slices.Concat(idsEarlier, idsLater))
}

// crowdOn binds a Segment of size to l and starts n goroutines popping from it, going on
// after lease refusals; the caller halts the crowd.
func crowdOn(t *testing.T, l *workerid.Lease, size, n int) (*harness, *crowd) {
	t.Helper()
	_, s := bind(t, l, size)
	h := &harness{lease: l}
	return h, startCrowd(h, s, n, 8, leaseRetry)
}

// TestSegmentAttack_SlotTakenOverBehindHoldersBack: while eight goroutines pop from A's
// Segment (buffers of 4), the slot key is removed behind A's back (Redis: DEL; etcd: the
// key's lease revoked) and B, another process, claims the slot at once. A does not know yet
// and keeps handing out buffered and fresh IDs until its renewal finds B's claim. Then:
// every one of B's IDs is above every ID A handed out; after A's lease ended (ErrTakenOver)
// and after the first refusal wrapping ErrTakenOver, A never hands out an ID again, though
// its Segment still holds buffered IDs; and no A call that began past ValidUntil got an ID.
func TestSegmentAttack_SlotTakenOverBehindHoldersBack(t *testing.T) {
	t.Parallel()
	for _, ls := range leaseStores {
		t.Run(ls.name, func(t *testing.T) {
			t.Parallel()
			st := ls.new(t)
			regA, _ := st.process(t, "a")
			regB, _ := st.process(t, "b")
			a := claimWithin(t, regA, 8*time.Second)
			_, sA := bind(t, a, 4)
			h := &harness{lease: a}
			var endedT atomic.Int64 // drawn once A's lease has ended
			quit := make(chan struct{})
			var watcher sync.WaitGroup
			watcher.Go(func() {
				select {
				case <-a.Done():
					endedT.Store(h.mark())
				case <-quit:
				}
			})
			defer watcher.Wait()
			defer close(quit)
			ca := startCrowd(h, sA, 8, 8, leaseRetry)
			defer ca.halt(t)
			testenv.WaitFor(t, 10*time.Second, "A's Segment to hand out 500 IDs", func() bool { return ca.handed.Load() >= 500 })

			droppedT := h.mark()
			var b *workerid.Lease
			for attempt := 1; b == nil; attempt++ {
				if attempt > 10 {
					t.Fatal("B never claimed the dropped slot before A's renewal re-claimed it")
				}
				st.dropSlot(t, a.WorkerID())
				ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
				l, err := regB.Claim(ctx, "auth")
				cancel()
				switch {
				case err == nil:
					b = l
					t.Cleanup(func() { _ = b.Release(context.Background()) })
				case errors.Is(err, workerid.ErrCollision):
					t.Logf("attempt %d: A's renewal re-claimed the slot before B could; dropping it again", attempt)
				default:
					t.Fatalf("B's claim: %v", err)
				}
			}
			select {
			case <-a.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("A's lease did not end within 10 s of B's claim")
			}
			if !errors.Is(a.Err(), workerid.ErrTakenOver) {
				t.Fatalf("A's lease ended with %v, want ErrTakenOver", a.Err())
			}
			made := ca.made.Load()
			testenv.WaitFor(t, 10*time.Second, "A's callers to call Next 200 more times", func() bool { return ca.made.Load() >= made+200 })

			_, cb := crowdOn(t, b, 4, 4)
			defer cb.halt(t)
			testenv.WaitFor(t, 10*time.Second, "B's Segment to hand out 500 IDs", func() bool { return cb.handed.Load() >= 500 })
			ca.halt(t)
			cb.halt(t)

			callsA, callsB := ca.all(), cb.all()
			idsA, idsB := handedOut(callsA), handedOut(callsB)
			ended := endedT.Load()
			firstTakenOver := int64(math.MaxInt64)
			for _, c := range callsA {
				if errors.Is(c.err, workerid.ErrTakenOver) && !errors.Is(c.err, snowflake.ErrWorkerLeaseLost) {
					t.Errorf("A refused with %v: not ErrWorkerLeaseLost", c.err)
				}
				if errors.Is(c.err, workerid.ErrTakenOver) && c.endT < firstTakenOver {
					firstTakenOver = c.endT
				}
			}
			if firstTakenOver == math.MaxInt64 {
				t.Error("no call on A's Segment ever refused with ErrTakenOver")
			}
			afterDrop := 0
			for _, c := range callsA {
				if c.err != nil {
					continue
				}
				if c.startT > droppedT {
					afterDrop++
				}
				if ended != 0 && c.startT > ended {
					t.Errorf("A handed out %d in a call that began after its lease ended", c.id)
				}
				if c.startT > firstTakenOver {
					t.Errorf("A handed out %d in a call that began after another call was refused with ErrTakenOver", c.id)
				}
			}
			checkHolder(t, "A", ca.perG, callsA)
			checkHolder(t, "B", cb.perG, callsB)
			checkRefusedOnceExpired(t, "A", callsA)
			checkRefusedOnceExpired(t, "B", callsB)
			checkSuccession(t, "A", "B", idsA, idsB)
			checkDecodes(t, "A and B", snowflake.DefaultLayout, 5, time.Now().Add(-time.Minute), time.Now(), slices.Concat(idsA, idsB))
			t.Logf("A: %d calls, %d IDs (%d from calls begun after the slot was dropped); B: %d calls, %d IDs; B's floor %d, A's last ID at %d",
				len(callsA), len(idsA), afterDrop, len(callsB), len(idsB), b.State().FloorUnixMilli, idTimeMilli(maxOf(idsA)))
		})
	}
}

func idTimeMilli(id int64) int64 {
	p, err := snowflake.Decode(id)
	if err != nil {
		return -1
	}
	return p.Time.UnixMilli()
}

// nextUntilRefused is for a Segment with IDs buffered whose lease's store is unreachable
// (store says how, for messages): until a call is refused, it waits for the lease's
// ValidUntil to pass, calling nothing meanwhile so the buffer stays full, and calls Next
// once. The refusal must be ErrWorkerLeaseLost. A call that got an ID is legitimate only if
// it began before the ValidUntil it set: a renewal answered before the outage, confirmed
// late. It returns every call it made, the refused one last.
func nextUntilRefused(t *testing.T, h *harness, s *snowflake.Segment, store string) []call {
	t.Helper()
	var calls []call
	for attempt := 1; ; attempt++ {
		if attempt > 20 {
			t.Fatalf("Next kept handing out IDs with the store %s", store)
		}
		testenv.WaitFor(t, 10*time.Second, "the lease's ValidUntil to pass", func() bool {
			v := h.lease.State().ValidUntil
			return v.IsZero() || !time.Now().Before(v)
		})
		r := h.next(context.Background(), s)
		calls = append(calls, r)
		if r.err == nil {
			if !r.start.Before(r.validAfter) {
				t.Fatalf("with the store %s, Next handed out %d at %s; the lease was valid until %s",
					store, r.id, r.start.Format(time.StampMicro), r.validAfter.Format(time.StampMicro))
			}
			continue
		}
		if !errors.Is(r.err, snowflake.ErrWorkerLeaseLost) {
			t.Fatalf("Next past ValidUntil with IDs buffered: %v, want ErrWorkerLeaseLost", r.err)
		}
		return calls
	}
}

// TestSegmentAttack_LeaseRunsOutWhileStoreUnreachable: the store stops answering (Redis
// SIGSTOPped; etcd's member stopped), so no renewal is confirmed, as when the holder is cut
// off or paused past its TTL. With 1023 IDs still buffered in the Segment, the first Next after
// ValidUntil must refuse with ErrWorkerLeaseLost; eight goroutines then hammer Next while the
// store is down, and no call that began at or after the (then known) ValidUntil gets an ID.
// When the store is back the lease renews or re-claims and the Segment resumes: everything
// it hands out stays unique, ordered, and above what it handed out before.
func TestSegmentAttack_LeaseRunsOutWhileStoreUnreachable(t *testing.T) {
	t.Parallel()
	for _, ls := range leaseStores {
		t.Run(ls.name, func(t *testing.T) {
			t.Parallel()
			st := ls.new(t)
			reg, _ := st.process(t, "a")
			a := claimWithin(t, reg, 8*time.Second)
			_, s := bind(t, a, 1024)
			h := &harness{lease: a}
			ctx := context.Background()
			first := h.next(ctx, s) // installs a buffer: 1023 IDs stay in it
			if first.err != nil {
				t.Fatal(first.err)
			}
			solo := []call{first}
			floorBefore := a.State().FloorUnixMilli

			st.down(t)
			wentDown := true
			defer func() {
				if wentDown {
					st.up(t)
				}
			}()
			tries := nextUntilRefused(t, h, s, "down")
			solo = append(solo, tries...)
			refused := tries[len(tries)-1]

			c := startCrowd(h, s, 8, 8, leaseRetry)
			defer c.halt(t)
			testenv.WaitFor(t, 10*time.Second, "400 calls with the store down", func() bool { return c.made.Load() >= 400 })
			// Stay down until the store has certainly expired the slot: it expires a TTL after
			// it received the last renewal, which it did within a renewal timeout (TTL/3) of
			// its sending. Redis then finds the slot gone and the lease re-claims it; etcd
			// refreshes its leases when the member restarts.
			expired := a.ExpiresAt().Add(attackTTL/3 + 50*time.Millisecond)
			testenv.WaitFor(t, 10*time.Second, "the slot's expiry at the store", func() bool { return time.Now().After(expired) })
			downIDs := c.handed.Load()
			upT := h.mark()
			st.up(t)
			wentDown = false
			handed := c.handed.Load()
			testenv.WaitFor(t, 10*time.Second, "the Segment to hand out 300 IDs after the store came back", func() bool {
				return c.handed.Load() >= handed+300
			})
			c.halt(t)

			if err := a.Err(); err != nil {
				t.Fatalf("the lease ended: %v", err)
			}
			all := slices.Concat(append(c.perG, solo)...)
			checkErrors(t, "crowd", c.all())
			checkRefusedOnceExpired(t, "store down", all)
			for _, r := range all {
				if r.err == nil && r.startT > upT && r.id <= first.id {
					t.Errorf("after the store came back, %d, at or below %d handed out before", r.id, first.id)
				}
			}
			ids := handedOut(all)
			checkUnique(t, "all", ids)
			checkPerCaller(t, "crowd", c.perG)
			checkGenerationOrder(t, "all", all)
			checkDecodes(t, "all", snowflake.DefaultLayout, 5, time.Now().Add(-time.Minute), time.Now(), ids)
			// Observation, not a verdict: after a re-claim the floor rises to the old
			// reservation, and IDs pre-generated under the old claim can still be handed out
			// below it (no other holder can have issued there: its floor is above them).
			floor, below := a.State().FloorUnixMilli, 0
			for _, r := range all {
				if r.err == nil && r.startT > upT && idTimeMilli(r.id) <= floor {
					below++
				}
			}
			t.Logf("first refusal %s after the first ID, with the buffer full; %d IDs handed out while down, %d calls in all; floor %d before, %d after; after the store came back %d IDs handed out at or below that floor",
				refused.start.Sub(first.start), downIDs, len(all), floorBefore, floor, below)
		})
	}
}

// TestSegmentAttack_ReclaimAfterReleaseNeverReissues: A's Segment (buffers of 3) is popped
// by eight goroutines while A releases its lease. Every call that began after Release
// returned is refused (ErrWorkerLeaseLost wrapping ErrReleased) though IDs are buffered. A
// new process claims the same WorkerID at once (the graceful restart) and its Segment hands
// out only IDs above everything A handed out, and above the last millisecond A's generator
// used, buffered-but-unissued IDs included.
func TestSegmentAttack_ReclaimAfterReleaseNeverReissues(t *testing.T) {
	t.Parallel()
	for _, ls := range leaseStores {
		t.Run(ls.name, func(t *testing.T) {
			t.Parallel()
			st := ls.new(t)
			regA, _ := st.process(t, "a")
			a := claimWithin(t, regA, 8*time.Second)
			gA, sA := bind(t, a, 3)
			h := &harness{lease: a}
			ca := startCrowd(h, sA, 8, 8, func(err error) bool {
				return leaseRetry(err) && !errors.Is(err, workerid.ErrReleased)
			})
			defer ca.halt(t)
			testenv.WaitFor(t, 10*time.Second, "A's Segment to hand out 1000 IDs", func() bool { return ca.handed.Load() >= 1000 })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			releasedT := h.mark()
			lastUsed := gA.LastTime()
			waitGroupWithin(t, &ca.wg, 10*time.Second, "A's callers to be refused after Release")
			ca.halt(t)
			after := h.next(context.Background(), sA)

			regA2, _ := st.process(t, "a2")
			a2 := claimWithin(t, regA2, 8*time.Second)
			_, c2 := crowdOn(t, a2, 3, 4)
			defer c2.halt(t)
			testenv.WaitFor(t, 10*time.Second, "the new process's Segment to hand out 500 IDs", func() bool { return c2.handed.Load() >= 500 })
			c2.halt(t)

			callsA := append(ca.all(), after)
			for _, c := range callsA {
				if c.startT > releasedT && (!errors.Is(c.err, snowflake.ErrWorkerLeaseLost) || !errors.Is(c.err, workerid.ErrReleased)) {
					t.Errorf("A's Segment, a call begun after Release returned: %d, %v; want ErrWorkerLeaseLost wrapping ErrReleased", c.id, c.err)
				}
			}
			calls2 := c2.all()
			idsA, ids2 := handedOut(callsA), handedOut(calls2)
			checkHolder(t, "A", ca.perG, callsA)
			checkHolder(t, "the new process", c2.perG, calls2)
			checkRefusedOnceExpired(t, "A", callsA)
			checkSuccession(t, "A", "the new process", idsA, ids2)
			if lo := idTimeMilli(minOf(ids2)); lo <= lastUsed.UnixMilli() {
				t.Errorf("the new process's first ID is in ms %d, at or below A's generator's last-used ms %d", lo, lastUsed.UnixMilli())
			}
			if f := a2.State().FloorUnixMilli; f < lastUsed.UnixMilli() {
				t.Errorf("the new claim's floor %d is below A's generator's last-used ms %d", f, lastUsed.UnixMilli())
			}
			t.Logf("A: %d IDs, last generated in ms %d; new process: %d IDs, floor %d",
				len(idsA), lastUsed.UnixMilli(), len(ids2), a2.State().FloorUnixMilli)
		})
	}
}

// TestSegmentAttack_ReclaimAfterCrashNeverReissues: A's process "crashes" (its store client
// is closed, so renewals fail, as if it had died or been paused) while eight goroutines keep
// calling Next on its Segment. B, a new process, claims the slot once the store expires it.
// A's Segment must refuse from its ValidUntil on, so that no call begun after B's claim gets an
// ID from A, and B hands out only IDs above everything A handed out.
func TestSegmentAttack_ReclaimAfterCrashNeverReissues(t *testing.T) {
	t.Parallel()
	for _, ls := range leaseStores {
		t.Run(ls.name, func(t *testing.T) {
			t.Parallel()
			st := ls.new(t)
			regA, crashA := st.process(t, "a")
			a := claimWithin(t, regA, 8*time.Second)
			h, ca := crowdOn(t, a, 3, 8)
			defer ca.halt(t)
			testenv.WaitFor(t, 10*time.Second, "A's Segment to hand out 500 IDs", func() bool { return ca.handed.Load() >= 500 })
			crashA()
			regB, _ := st.process(t, "b")
			b := claimWithin(t, regB, 10*time.Second)
			claimedT := h.mark()
			_, cb := crowdOn(t, b, 3, 4)
			defer cb.halt(t)
			made := ca.made.Load()
			testenv.WaitFor(t, 10*time.Second, "B's Segment to hand out 500 IDs", func() bool { return cb.handed.Load() >= 500 })
			testenv.WaitFor(t, 10*time.Second, "A's callers to call Next 200 more times", func() bool { return ca.made.Load() >= made+200 })
			ca.halt(t)
			cb.halt(t)

			callsA, callsB := ca.all(), cb.all()
			for _, c := range callsA {
				if c.err == nil && c.startT > claimedT {
					t.Errorf("A handed out %d in a call begun after B had claimed the slot", c.id)
				}
			}
			idsA, idsB := handedOut(callsA), handedOut(callsB)
			checkHolder(t, "A", ca.perG, callsA)
			checkHolder(t, "B", cb.perG, callsB)
			checkRefusedOnceExpired(t, "A", callsA)
			checkSuccession(t, "A", "B", idsA, idsB)
			t.Logf("A: %d calls, %d IDs, last in ms %d; B: %d IDs, floor %d",
				len(callsA), len(idsA), idTimeMilli(maxOf(idsA)), len(idsB), b.State().FloorUnixMilli)
		})
	}
}

// TestSegmentAttack_PartitionedHolderComesBackAfterAnotherHolder: A reaches the store
// through a Proxy that starts dropping everything, while eight goroutines pop from A's
// Segment (buffers of 64). A's lease runs out on A's side, the store expires A's slot, B
// claims it, hands out IDs and releases it. Then A's path heals: A's renewal finds the slot
// gone and re-claims it above B's high-water mark, and A's Segment, which still holds IDs
// generated before the partition, resumes. Verdicts: no A call that began after B's claim
// and ended before the heal got an ID; B's IDs are above everything A handed out before the
// heal; every ID A hands out after the heal is either below all of B's (generated before the
// partition) or above all of B's; nothing is handed out twice; order holds on each Segment.
func TestSegmentAttack_PartitionedHolderComesBackAfterAnotherHolder(t *testing.T) {
	t.Parallel()
	for _, ls := range leaseStores {
		t.Run(ls.name, func(t *testing.T) {
			t.Parallel()
			st := ls.new(t)
			p := testenv.NewProxy(t, st.hostport)
			regA, _ := st.registryAt(t, p.Addr(), "a")
			regB, _ := st.process(t, "b")
			a := claimWithin(t, regA, 8*time.Second)
			h, ca := crowdOn(t, a, 64, 8)
			defer ca.halt(t)
			testenv.WaitFor(t, 10*time.Second, "A's Segment to hand out 500 IDs", func() bool { return ca.handed.Load() >= 500 })

			p.Blackhole(true)
			defer p.Blackhole(false)
			failed := ca.failed.Load()
			testenv.WaitFor(t, 10*time.Second, "A's Segment to refuse", func() bool { return ca.failed.Load() > failed })
			testenv.WaitFor(t, 10*time.Second, "the store to expire A's slot", func() bool { return !st.slotHeld(t, a.WorkerID()) })
			b := claimWithin(t, regB, 8*time.Second)
			claimedT := h.mark()
			gB, sB := bind(t, b, 64)
			hB := &harness{lease: b}
			cb := startCrowd(hB, sB, 4, 8, leaseRetry)
			defer cb.halt(t)
			testenv.WaitFor(t, 10*time.Second, "B's Segment to hand out 300 IDs", func() bool { return cb.handed.Load() >= 300 })
			cb.halt(t)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := b.Release(ctx); err != nil {
				t.Fatal(err)
			}
			bLast := gB.LastTime()

			healT := h.mark()
			p.Blackhole(false)
			handed := ca.handed.Load()
			testenv.WaitFor(t, 10*time.Second, "A's Segment to hand out 300 IDs after the heal", func() bool { return ca.handed.Load() >= handed+300 })
			ca.halt(t)
			if err := a.Err(); err != nil {
				t.Fatalf("A's lease ended: %v", err)
			}

			callsA, callsB := ca.all(), cb.all()
			idsB := handedOut(callsB)
			loB, hiB := minOf(idsB), maxOf(idsB)
			var before, stale, fresh []int64
			for _, c := range callsA {
				switch {
				case c.err != nil:
				case c.startT > claimedT && c.endT < healT:
					t.Errorf("A handed out %d in a call begun after B claimed the slot, before A's path healed", c.id)
				case c.endT < healT:
					before = append(before, c.id)
				case c.id < loB:
					stale = append(stale, c.id)
				case c.id > hiB:
					fresh = append(fresh, c.id)
				default:
					t.Errorf("after the heal A handed out %d, inside B's range [%d, %d]", c.id, loB, hiB)
				}
			}
			if hi := maxOf(before); loB <= hi {
				t.Errorf("B handed out %d, at or below %d, which A handed out before", loB, hi)
			}
			checkHolder(t, "A", ca.perG, callsA)
			checkHolder(t, "B", cb.perG, callsB)
			checkRefusedOnceExpired(t, "A", callsA)
			checkRefusedOnceExpired(t, "B", callsB)
			checkUnique(t, "A and B", slices.Concat(handedOut(callsA), idsB))
			floor := a.State().FloorUnixMilli
			t.Logf("A: %d IDs before the heal, %d after (%d of them generated before the partition, in ms %d..%d, at or below A's new floor %d; %d above B's)",
				len(before), len(stale)+len(fresh), len(stale), idTimeMilli(minOf(stale)), idTimeMilli(maxOf(stale)), floor, len(fresh))
			t.Logf("B: %d IDs in ms %d..%d, floor %d, last used %d", len(idsB), idTimeMilli(loB), idTimeMilli(hiB), b.State().FloorUnixMilli, bLast.UnixMilli())
		})
	}
}

// fillerParkedOnSend reports whether a Segment's filler is blocked handing over a filled
// buffer (not inside Generator.Fill): the chunk channel then holds a full buffer.
func fillerParkedOnSend() bool {
	for _, g := range strings.Split(stacks(), "\n\n") {
		header, frames, _ := strings.Cut(g, "\n")
		if (strings.Contains(header, "[select") || strings.Contains(header, "[chan send")) &&
			strings.Contains(frames, "snowflake.(*Segment).fill(") && !strings.Contains(frames, "snowflake.(*Generator).Fill(") {
			return true
		}
	}
	return false
}

// TestSegmentAttack_NoIDAtOrBelowFloorAfterReclaim: WithLease promises a bound generator
// "issues nothing at or below the lease's high-water mark", and Segment says its guarantees
// are the generator's. A's Segment (buffers of 256) hands out one ID and fills ahead until
// its filler is parked with a full buffer queued (seen in the goroutine dump). A's path to
// the store is cut (Proxy blackhole): past ValidUntil, Next refuses with ErrWorkerLeaseLost
// although IDs are buffered. The store expires A's slot; the path heals; A's renewal finds
// the slot gone and re-claims it, and the new claim's floor is A's old reservation, above
// every ID generated under the old claim. From then on no ID handed out may be in a
// millisecond at or below the lease's floor; the refusal cleared only the buffer being
// handed out, so the buffers queued before the outage must not come out either.
func TestSegmentAttack_NoIDAtOrBelowFloorAfterReclaim(t *testing.T) {
	t.Parallel()
	for _, ls := range leaseStores {
		t.Run(ls.name, func(t *testing.T) {
			t.Parallel()
			st := ls.new(t)
			p := testenv.NewProxy(t, st.hostport)
			reg, _ := st.registryAt(t, p.Addr(), "a")
			a := claimWithin(t, reg, 8*time.Second)
			const size = 256
			_, s := bind(t, a, size)
			h := &harness{lease: a}
			ctx := context.Background()
			first := h.next(ctx, s)
			if first.err != nil {
				t.Fatal(first.err)
			}
			testenv.WaitFor(t, 10*time.Second, "the filler to park with a full buffer queued", fillerParkedOnSend)

			p.Blackhole(true)
			defer p.Blackhole(false)
			nextUntilRefused(t, h, s, "cut off")
			testenv.WaitFor(t, 10*time.Second, "the store to expire A's slot", func() bool { return !st.slotHeld(t, a.WorkerID()) })
			oldFloor := a.State().FloorUnixMilli
			p.Blackhole(false)
			testenv.WaitFor(t, 10*time.Second, "A's lease to re-claim the slot with a higher floor", func() bool {
				st := a.State()
				return st.FloorUnixMilli > oldFloor && time.Now().Before(st.ValidUntil)
			})
			if err := a.Err(); err != nil {
				t.Fatalf("A's lease ended: %v", err)
			}

			var below []string
			got := 0
			for deadline := time.Now().Add(10 * time.Second); got < 3*size; {
				if time.Now().After(deadline) {
					t.Fatalf("only %d IDs within 10 s of the re-claim", got)
				}
				floor := a.State().FloorUnixMilli // floors only rise while the lease runs
				r := h.next(ctx, s)
				if r.err != nil {
					if !leaseRetry(r.err) {
						t.Fatalf("Next after the re-claim: %v", r.err)
					}
					continue
				}
				got++
				if ms := idTimeMilli(r.id); ms <= floor {
					below = append(below, fmt.Sprintf("%d (ms %d, %s before the floor)", r.id, ms, time.Duration(floor-ms)*time.Millisecond))
				}
			}
			if len(below) > 0 {
				t.Errorf("after the re-claim raised the lease's floor from %d to %d, the Segment handed out %d of %d IDs at or below it, generated under the old claim before the outage (first ID handed out before the outage: %d, ms %d); first few: %s",
					oldFloor, a.State().FloorUnixMilli, len(below), got, first.id, idTimeMilli(first.id), strings.Join(below[:min(3, len(below))], ", "))
			}
		})
	}
}
