package instrument_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/fleet/redisstore"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// beatsElsewhere publishes a Locker's heartbeat into another store than
// its locks' (etcd locks with Redis heartbeats): the beats get through
// while the lock store is down, and the test reads them.
type beatsElsewhere struct {
	*redislock.Locker
	beats fleet.Store
}

func (b beatsElsewhere) FleetStore() fleet.Store { return b.beats }

// outage is a FailOpen governed redislock whose Redis is reached through a
// fault proxy, with its heartbeat on a second Redis.
type outage struct {
	redis  *testenv.Redis
	proxy  *testenv.Proxy
	client *redis.Client // through the proxy
	beats  *redis.Client
	locker *instrument.Governed
	reg    *prometheus.Registry
	inst   string
}

func newOutage(t *testing.T, inst string) *outage {
	t.Helper()
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	// No retries: a reply lost is the caller's error, as with a client
	// whose retries are spent; the read timeout is what "the store did not
	// answer" is.
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	raw, err := redislock.New(c, redislock.WithService("payments"), redislock.WithInstance(inst))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	bc := redis.NewClient(&redis.Options{Addr: testenv.NewRedis(t).Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = bc.Close() })
	reg := prometheus.NewRegistry()
	g, err := instrument.NewGoverned(beatsElsewhere{raw, redisstore.New(bc)},
		instrument.WithRegisterer(reg), instrument.WithStoreFailure(instrument.FailOpen),
		instrument.WithHeartbeat(fleet.WithInstance(inst), fleet.WithService("payments"), fleet.WithInterval(100*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return &outage{redis: r, proxy: p, client: c, beats: bc, locker: g, reg: reg, inst: inst}
}

// beat returns the latest heartbeat written after since (polling the
// store; the publisher writes one every 100 ms).
func (o *outage) beat(t *testing.T, since time.Time) *fleet.Heartbeat {
	t.Helper()
	var hb *fleet.Heartbeat
	testenv.WaitFor(t, time.Minute, "a heartbeat sent after the step", func() bool {
		v, err := o.beats.Get(context.Background(), fleet.RedisKey(o.inst)).Bytes()
		if err != nil {
			return false
		}
		if hb, err = fleet.Decode(v); err != nil {
			t.Fatal(err)
		}
		return hb.SentAt.After(since)
	})
	return hb
}

// gauges reads what every path must bring back: waiters, held leases,
// decisions counted as degraded, leases lost.
func (o *outage) gauges(t *testing.T) (waiters, held, degraded, lost float64) {
	t.Helper()
	return counter(t, o.reg, "lockgov_lock_waiters", nil), counter(t, o.reg, "lockgov_lock_held", nil),
		degradedLocks(t, o.reg), counter(t, o.reg, "lockgov_lock_lost_total", nil)
}

func (o *outage) expect(t *testing.T, step string, waiters, held, degraded, lost float64) {
	t.Helper()
	w, h, d, l := o.gauges(t)
	if w != waiters || h != held || d != degraded || l != lost {
		t.Fatalf("%s: waiters %v held %v degraded %v lost %v, want %v %v %v %v", step, w, h, d, l, waiters, held, degraded, lost)
	}
}

// TestFailOpen_ALostAcquireReplyIsOneDecisionAndLeavesNoWaiter: Redis ran
// the acquire, but its reply never reached the client (the connection
// dropped after the command ran). The client's read times out: a store
// failure, so FailOpen falls back. Whatever the caller gets, it is counted
// once: a process-local grant (fence 0) counts one degraded decision, and
// the heartbeat marks it fallback; no waiter is left in the gauge or the
// heartbeat; Release brings lockgov_lock_held back to 0 and empties the
// heartbeat; and the lock Redis granted to nobody is taken back (leave),
// so that another process gets the key at once.
func TestFailOpen_ALostAcquireReplyIsOneDecisionAndLeavesNoWaiter(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  instrument.AcquireOption
	}{
		{"until-deadline", instrument.WaitUntilDeadline()},
		{"fail-fast", instrument.FailFast()},
		{"retry", instrument.Retry(instrument.ConstantBackoff(10*time.Millisecond), 5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lostReply(t, "lost-reply-"+tc.name, tc.opt)
		})
	}
}

func lostReply(t *testing.T, inst string, opt instrument.AcquireOption) {
	o := newOutage(t, inst)
	ctx := withTimeout(t, 2*time.Minute)
	const key = "lock:order:1"
	dropped := o.proxy.DropNextReply()
	l, err := o.locker.Acquire(ctx, key, instrument.WithTTL(time.Minute), opt)
	select {
	case <-dropped:
	default:
		t.Fatal("no reply was dropped: the test's premise does not hold")
	}
	if err != nil {
		t.Fatalf("acquire whose reply was lost, FailOpen: %v, want a lease", err)
	}
	wantDegraded := 0.0
	if l.Fence() == 0 {
		wantDegraded = 1
	}
	o.expect(t, "after the acquire", 0, 1, wantDegraded, 0)
	hb := o.beat(t, time.Now())
	if len(hb.Held) != 1 || len(hb.Waiting) != 0 || hb.Held[0].Fallback != (l.Fence() == 0) {
		t.Fatalf("heartbeat held %+v waiting %+v, want one hold (fallback %v) and no wait", hb.Held, hb.Waiting, l.Fence() == 0)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	o.expect(t, "after the release", 0, 0, wantDegraded, 0)
	if hb := o.beat(t, time.Now()); len(hb.Held)+len(hb.Waiting) != 0 {
		t.Fatalf("heartbeat after the release: held %+v waiting %+v", hb.Held, hb.Waiting)
	}
	oc := redis.NewClient(&redis.Options{Addr: o.redis.Addr()})
	defer oc.Close()
	other, err := redislock.New(oc)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ol, err := other.Acquire(ctx, key, instrument.FailFast())
	if err != nil {
		t.Fatalf("another process after the release: %v, want the key (the lock whose reply was lost is left in Redis)", err)
	}
	_ = ol.Release(ctx)
}

// TestFailOpen_AStoreLeaseLostInAPauseHandsTheKeyToTheFallbackOnce: this
// process holds a Redis lease (TTL 1 s) and Redis stops answering
// (SIGSTOP) for longer than the TTL, while another goroutine waits for the
// key. The lease cannot be renewed and is lost (counted once); the waiter
// falls back and gets the process-local lock (one degraded decision, no
// waiter left). When Redis answers again the lost lease's Release counts
// nothing more; once Redis's copy of the lock has expired (a renewal
// queued during the pause can re-arm it at the resume), a new Acquire goes
// to Redis and is
// granted beside the fallback lease (FailOpen's documented trade); the
// heartbeat tells the two apart. Every gauge ends at 0.
func TestFailOpen_AStoreLeaseLostInAPauseHandsTheKeyToTheFallbackOnce(t *testing.T) {
	t.Parallel()
	o := newOutage(t, "paused")
	ctx := withTimeout(t, 2*time.Minute)
	const key = "lock:order:1"
	held, err := o.locker.Acquire(ctx, key, instrument.FailFast(), instrument.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if held.Fence() == 0 {
		t.Fatal("the first lease is process-local: the test's premise does not hold")
	}
	if err := o.redis.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := true
	t.Cleanup(func() {
		if paused {
			_ = o.redis.Resume()
		}
	})
	type result struct {
		l   instrument.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := o.locker.Acquire(ctx, key, instrument.WithTTL(time.Second))
		got <- result{l, err}
	}()
	<-held.Context().Done()
	if !errors.Is(context.Cause(held.Context()), instrument.ErrLockLost) {
		t.Fatalf("the Redis lease ended with %v, want ErrLockLost", context.Cause(held.Context()))
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("the waiter: %v, want a process-local lease", r.err)
	}
	if r.l.Fence() != 0 {
		t.Fatalf("the waiter's lease has fence %d while Redis is paused, want 0 (process-local)", r.l.Fence())
	}
	o.expect(t, "the lease lost, the waiter granted locally", 0, 1, 1, 1)

	if err := o.redis.Resume(); err != nil {
		t.Fatal(err)
	}
	paused = false
	if err := held.Release(ctx); err == nil {
		t.Error("Release of a lost lease: nil, want an error")
	}
	o.expect(t, "the lost lease released", 0, 1, 1, 1)
	testenv.WaitFor(t, time.Minute, "Redis to answer through the proxy", func() bool { return o.client.Ping(ctx).Err() == nil })
	// The lease was lost by this process's clock: a TTL after its last
	// renewal was sent. Redis's copy lives a TTL after that renewal ran,
	// which under load is later, and a renewal written during the pause
	// runs at the resume and re-arms a key that has not expired by then.
	// What this test studies starts once Redis's copy is gone.
	testenv.WaitFor(t, time.Minute, "the lost lease's key to expire in Redis", func() bool {
		n, err := o.client.Exists(ctx, key).Result()
		return err == nil && n == 0
	})
	again, err := o.locker.Acquire(ctx, key, instrument.FailFast())
	if err != nil {
		t.Fatalf("acquire with Redis back: %v", err)
	}
	if again.Fence() == 0 {
		t.Fatal("acquire with Redis back got a process-local lease")
	}
	o.expect(t, "a Redis lease beside the fallback one", 0, 2, 1, 1)
	hb := o.beat(t, time.Now())
	fallbacks := 0
	for _, h := range hb.Held {
		if h.Fallback {
			fallbacks++
		}
	}
	if len(hb.Held) != 2 || fallbacks != 1 || len(hb.Waiting) != 0 {
		t.Fatalf("heartbeat held %+v waiting %+v, want the key twice, once as fallback", hb.Held, hb.Waiting)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	o.expect(t, "all released", 0, 0, 1, 1)
	if hb := o.beat(t, time.Now()); len(hb.Held)+len(hb.Waiting) != 0 {
		t.Fatalf("heartbeat after the releases: held %+v waiting %+v", hb.Held, hb.Waiting)
	}
}

// TestFailOpen_StoreBackWhileFallbackHoldersHoldCountsEachDecisionOnce:
// Redis is down; one goroutine holds the key's process-local lock, two
// wait for it (until their deadline, and with Retry), both counted as
// waiters and listed as fallback waits. Redis comes back while they wait:
// a new Acquire goes to Redis (granted: no Redis lock on the key). The
// waiters stay on the process-local lock and get it in turn as it is
// released: each grant one degraded decision, nothing counted twice, no
// waiter left in the gauge or the heartbeat.
func TestFailOpen_StoreBackWhileFallbackHoldersHoldCountsEachDecisionOnce(t *testing.T) {
	t.Parallel()
	o := newOutage(t, "store-back")
	ctx := withTimeout(t, 2*time.Minute)
	const key = "lock:order:1"
	if err := o.redis.Kill(); err != nil {
		t.Fatal(err)
	}
	h, err := o.locker.Acquire(ctx, key)
	if err != nil || h.Fence() != 0 {
		t.Fatalf("Redis down: %v, want a process-local lease", err)
	}
	o.expect(t, "the fallback holder", 0, 1, 1, 0)
	got := make(chan instrument.Lease, 2)
	fail := make(chan error, 2)
	for _, opts := range [][]instrument.AcquireOption{nil, {instrument.Retry(instrument.ConstantBackoff(10*time.Millisecond), 1<<20)}} {
		go func() {
			l, err := o.locker.Acquire(ctx, key, opts...)
			if err != nil {
				fail <- err
				return
			}
			got <- l
		}()
	}
	testenv.WaitFor(t, time.Minute, "two waiters on the process-local lock", func() bool {
		return counter(t, o.reg, "lockgov_lock_waiters", nil) == 2
	})
	hb := o.beat(t, time.Now())
	if len(hb.Waiting) != 2 || !hb.Waiting[0].Fallback || !hb.Waiting[1].Fallback {
		t.Fatalf("heartbeat waiting %+v, want two fallback waits", hb.Waiting)
	}
	if err := o.redis.Restart(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "Redis to answer through the proxy", func() bool { return o.client.Ping(ctx).Err() == nil })
	s, err := o.locker.Acquire(ctx, key, instrument.FailFast())
	if err != nil || s.Fence() == 0 {
		t.Fatalf("acquire with Redis back: %v (fence %v), want a Redis lease", err, s)
	}
	o.expect(t, "Redis back, a Redis lease beside the fallback holder", 2, 2, 1, 0)
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for n := 2; n <= 3; n++ {
		select {
		case l := <-got:
			if l.Fence() != 0 {
				t.Fatalf("a fallback waiter got fence %d, want 0 (it waited on the process-local lock)", l.Fence())
			}
			o.expect(t, "a waiter granted", float64(3-n), 1, float64(n), 0)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case err := <-fail:
			t.Fatalf("a fallback waiter: %v", err)
		}
	}
	o.expect(t, "all released", 0, 0, 3, 0)
	if hb := o.beat(t, time.Now()); len(hb.Held)+len(hb.Waiting) != 0 {
		t.Fatalf("heartbeat after the releases: held %+v waiting %+v", hb.Held, hb.Waiting)
	}
}

// TestFailOpen_AStoreLeaseTakenBesideAFallbackLeaseExcludesTheNextFallback:
// Redis comes back while a process-local lease F holds the key, and this
// process takes the key's Redis lease S (Redis never saw F: granted beside
// it, as documented). F is released; Redis goes down again while S is
// still valid. S, this process's own valid store lease, must exclude the
// next fallback Acquire of the key, as any store lease of this process
// does: FailFast is refused, a waiter gets the key when S is released.
// Each decision is counted once and no waiter is left.
func TestFailOpen_AStoreLeaseTakenBesideAFallbackLeaseExcludesTheNextFallback(t *testing.T) {
	t.Parallel()
	o := newOutage(t, "beside")
	ctx := withTimeout(t, 2*time.Minute)
	const key = "lock:order:1"
	if err := o.redis.Kill(); err != nil {
		t.Fatal(err)
	}
	f, err := o.locker.Acquire(ctx, key)
	if err != nil || f.Fence() != 0 {
		t.Fatalf("Redis down: %v, want a process-local lease", err)
	}
	if err := o.redis.Restart(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "Redis to answer through the proxy", func() bool { return o.client.Ping(ctx).Err() == nil })
	s, err := o.locker.Acquire(ctx, key, instrument.FailFast(), instrument.WithTTL(time.Minute))
	if err != nil || s.Fence() == 0 {
		t.Fatalf("Redis back: %v, want a Redis lease", err)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := o.redis.Kill(); err != nil {
		t.Fatal(err)
	}
	o.expect(t, "the Redis lease held, Redis down again", 0, 1, 1, 0)
	if l, err := o.locker.Acquire(ctx, key, instrument.FailFast()); err == nil {
		_ = l.Release(ctx)
		t.Fatalf("Redis down, this process holding the key's Redis lease (context alive: %v): FailOpen granted a process-local lease (fence %d) beside it",
			s.Context().Err() == nil, l.Fence())
	} else if !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("Redis down, key held in this process: %v, want ErrNotAcquired", err)
	}
	if err := s.Context().Err(); err != nil {
		t.Fatalf("the Redis lease ended (%v) before the test was done: the premise does not hold", context.Cause(s.Context()))
	}
	o.expect(t, "the fallback refused", 0, 1, 2, 0)
	got := make(chan error, 1)
	go func() {
		l, err := o.locker.Acquire(ctx, key)
		if err == nil {
			if l.Fence() != 0 {
				t.Errorf("the waiter's fence %d, want 0", l.Fence())
			}
			err = l.Release(ctx)
		}
		got <- err
	}()
	testenv.WaitFor(t, time.Minute, "the waiter on the process-local lock", func() bool {
		return counter(t, o.reg, "lockgov_lock_waiters", nil) == 1
	})
	_ = s.Release(ctx) // Redis is down: its lock there is left to its TTL
	if err := <-got; err != nil {
		t.Fatalf("the waiter after the Redis lease's release: %v", err)
	}
	o.expect(t, "all released", 0, 0, 3, 0)
}
