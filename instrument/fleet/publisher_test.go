package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/policy"
	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

const interval = 100 * time.Millisecond

var quiet = slog.New(slog.DiscardHandler)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds, failing after a generous deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true, MaxRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func redisLocker(t *testing.T, c redis.UniversalClient) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// govern governs l with a fast heartbeat; closing the result is the test's
// cleanup.
func govern(t *testing.T, l instrument.Locker, beat ...fleet.Option) *instrument.Governed {
	t.Helper()
	opts := append([]fleet.Option{fleet.WithInterval(interval)}, beat...)
	g, err := instrument.NewGoverned(l, instrument.WithLogger(quiet), instrument.WithHeartbeat(opts...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func offsetClock(d time.Duration) fleet.Option {
	return fleet.WithClock(func() time.Time { return time.Now().Add(d) })
}

func redisBeat(t *testing.T, c redis.UniversalClient, instance string) *fleet.Heartbeat {
	t.Helper()
	b, err := c.Get(ctxFor(t, 5*time.Second), fleet.RedisKey(instance)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	hb, err := fleet.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return hb
}

func redisFleetKeys(t *testing.T, c redis.UniversalClient) []string {
	t.Helper()
	var keys []string
	it := c.Scan(ctxFor(t, 5*time.Second), 0, fleet.RedisPrefix+"*", 100).Iterator()
	for it.Next(ctxFor(t, 5*time.Second)) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// Two governed Lockers on one Redis publish one heartbeat, listing both
// processes' locks with the right fields and a TTL of three intervals, and
// never the locks' owner tokens; closing the last Locker deletes it.
func TestHeartbeat_RedisOnePerProcessWithFieldsTTLAndNoToken(t *testing.T) {
	c := redisClient(t)
	const inst = "pay-7f9c"
	g1 := govern(t, redisLocker(t, c), fleet.WithInstance(inst), fleet.WithService("payments"))
	g2 := govern(t, redisLocker(t, c))

	ctx := ctxFor(t, 10*time.Second)
	l1, err := g1.Acquire(ctx, "lock:order:1")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := g2.Acquire(ctx, "lock:order:2")
	if err != nil {
		t.Fatal(err)
	}
	var hb *fleet.Heartbeat
	eventually(t, "a heartbeat listing both locks", func() bool {
		hb = redisBeat(t, c, inst)
		return hb != nil && len(hb.Held) == 2 && hb.Clock != nil
	})
	if keys := redisFleetKeys(t, c); len(keys) != 1 || keys[0] != fleet.RedisKey(inst) {
		t.Errorf("heartbeat keys %q, want exactly [%s]: one per process and store", keys, fleet.RedisKey(inst))
	}
	if hb.Service != "payments" || hb.Version == "" || hb.Host == "" || hb.PID != os.Getpid() ||
		hb.Interval != interval || hb.StartedAt.IsZero() || hb.SentAt.Before(hb.StartedAt) || hb.Tier != "ok" {
		t.Errorf("heartbeat fields: %+v", hb)
	}
	if hb.Clock.Source != fleet.ClockSourceStore || hb.Clock.RTT <= 0 {
		t.Errorf("clock sample %+v, want one measured with TIME", hb.Clock)
	}
	got := map[string]fleet.HeldLock{}
	for _, h := range hb.Held {
		got[h.Key] = h
	}
	for _, l := range []instrument.Lease{l1, l2} {
		h, ok := got[l.Key()]
		if !ok || h.Fence != l.Fence() || h.Backend != "redis" || h.Pattern == "" || h.Since.IsZero() {
			t.Errorf("held lock %s: %+v", l.Key(), h)
		}
	}
	ttl, err := c.PTTL(ctx, fleet.RedisKey(inst)).Result()
	if err != nil || ttl <= 0 || ttl > 3*interval {
		t.Errorf("heartbeat PTTL %v (%v), want within (0, %v]", ttl, err, 3*interval)
	}
	raw, err := c.Get(ctx, fleet.RedisKey(inst)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []instrument.Lease{l1, l2} {
		k, _ := redislock.KeysFor(l.Key())
		v, err := c.Get(ctx, k.Lock).Result()
		if err != nil {
			t.Fatal(err)
		}
		token, _, _ := strings.Cut(v, " ")
		if len(token) < 8 || strings.Contains(raw, token) {
			t.Errorf("heartbeat %s carries the owner token %q of %s", raw, token, l.Key())
		}
	}

	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the released lock to leave the heartbeat", func() bool {
		hb := redisBeat(t, c, inst)
		return hb != nil && len(hb.Held) == 1 && hb.Held[0].Key == l2.Key()
	})
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g1.Close(); err != nil {
		t.Fatal(err)
	}
	if redisBeat(t, c, inst) == nil {
		t.Fatal("heartbeat deleted while a governed Locker still uses the store")
	}
	if err := g2.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, fleet.RedisKey(inst)).Result(); err != nil || n != 0 {
		t.Errorf("heartbeat still there (%d, %v) after the last Locker closed", n, err)
	}
}

// A process that stops beating without cleaning up (a crash) disappears
// from the store when its heartbeat's TTL runs out.
func TestHeartbeat_ExpiresAfterTheProcessStops(t *testing.T) {
	c := redisClient(t)
	const inst = "crashy"
	a, err := fleet.Attach(redisLocker(t, c).FleetStore(), fleet.WithInstance(inst), fleet.WithInterval(interval), fleet.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a heartbeat", func() bool { return redisBeat(t, c, inst) != nil })
	fleet.Abandon(a)
	eventually(t, "the heartbeat to expire", func() bool { return redisBeat(t, c, inst) == nil })
}

// A process whose wall clock is 300ms ahead of Redis is in the degrade
// tier: its new leases get the TTL x0.7 in Redis.
func TestSkew_Redis300msDegradesLockTTLs(t *testing.T) {
	c := redisClient(t)
	const inst = "skew-300"
	var log syncBuffer
	g := skewed(t, c, inst, 300*time.Millisecond, "degrade", fleet.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	ctx := ctxFor(t, 10*time.Second)
	l, err := g.Acquire(ctx, "lock:stock:1", instrument.WithTTL(10*time.Second), instrument.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	k, _ := redislock.KeysFor(l.Key())
	ttl, err := c.PTTL(ctx, k.Lock).Result()
	if err != nil || ttl > 7*time.Second || ttl < 3*time.Second {
		t.Errorf("lock PTTL %v (%v), want the degraded 7s (10s x0.7), not 10s", ttl, err)
	}
	hb := redisBeat(t, c, inst)
	if off := hb.Clock.Offset; off < 200*time.Millisecond || off > 400*time.Millisecond {
		t.Errorf("measured offset %v, want about 300ms", off)
	}
	// Several more beats measure the same tier; the warning is logged once.
	first := hb.SentAt
	eventually(t, "three more beats", func() bool { return redisBeat(t, c, inst).SentAt.After(first.Add(3 * interval)) })
	if n := strings.Count(log.String(), "degrade tier"); n != 1 {
		t.Errorf("%d degrade warnings in the log, want 1 (at most one a minute):\n%s", n, log.String())
	}
}

// skewed is a governed Redis Locker whose process clock is off by off,
// once its heartbeat has measured tier.
func skewed(t *testing.T, c redis.UniversalClient, inst string, off time.Duration, tier string, beat ...fleet.Option) *instrument.Governed {
	t.Helper()
	g := govern(t, redisLocker(t, c), append([]fleet.Option{fleet.WithInstance(inst), offsetClock(off)}, beat...)...)
	eventually(t, "the "+tier+" tier", func() bool {
		hb := redisBeat(t, c, inst)
		return hb != nil && hb.Tier == tier
	})
	return g
}

// syncBuffer is a log sink safe for the publisher's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A process whose wall clock is 700ms ahead is in the reject tier: Acquire
// and the ID generator bound to its WorkerID lease both refuse, with the
// offset in the error.
func TestSkew_Redis700msRejectsLocksAndIDs(t *testing.T) {
	c := redisClient(t)
	const inst = "skew-700"
	g := skewed(t, c, inst, 700*time.Millisecond, "reject")
	ctx := ctxFor(t, 10*time.Second)
	_, err := g.Acquire(ctx, "lock:stock:1")
	if !errors.Is(err, instrument.ErrClockSkew) || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("Acquire: %v, want ErrClockSkew with the offset", err)
	}

	// A fresh slot waits out one lease TTL of unknown high-water mark.
	reg, err := workerid.NewRedis(c, workerid.WithLogger(quiet), workerid.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := reg.Claim(ctxFor(t, 30*time.Second), "ids")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	gen, err := snowflake.New(lease.WorkerID(), snowflake.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	_, err = gen.NextID(ctx)
	var se *snowflake.ClockSkewError
	if !errors.As(err, &se) || !errors.Is(err, snowflake.ErrClockSkew) || se.Offset < 500*time.Millisecond {
		t.Fatalf("NextID: %v, want *ClockSkewError with an offset above 500ms", err)
	}
	if err := gen.Fill(ctx, make([]int64, 3)); !errors.Is(err, snowflake.ErrClockSkew) {
		t.Fatalf("Fill: %v, want ErrClockSkew", err)
	}
	// The lease shares the process's heartbeat on this store and lists its WorkerID.
	eventually(t, "the WorkerID in the heartbeat", func() bool {
		hb := redisBeat(t, c, inst)
		return hb != nil && len(hb.WorkerIDs) == 1 && hb.WorkerIDs[0].ID == lease.WorkerID() && hb.WorkerIDs[0].Service == "ids"
	})
	if keys := redisFleetKeys(t, c); len(keys) != 1 {
		t.Errorf("heartbeat keys %q, want one for the process", keys)
	}
}

func etcdBeat(t *testing.T, c *clientv3.Client, instance string) (*fleet.Heartbeat, int64) {
	t.Helper()
	r, err := c.Get(ctxFor(t, 5*time.Second), fleet.EtcdKey(instance))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return nil, 0
	}
	hb, err := fleet.Decode(r.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return hb, r.Kvs[0].Lease
}

// etcd has no clock: the process applies the offset the agent measured
// and wrote back (here the test plays the agent). 300ms degrades the lock
// lease's TTL, 700ms rejects; the heartbeat lives on a lease and goes with
// Close.
func TestSkew_EtcdAppliesTheAgentsTierReport(t *testing.T) {
	e := testenv.NewEtcd(t)
	c := e.Client(t)
	l, err := etcdlock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	const inst = "etcd-proc"
	g := govern(t, l, fleet.WithInstance(inst))
	ctx := ctxFor(t, 20*time.Second)
	eventually(t, "a heartbeat on etcd", func() bool { hb, _ := etcdBeat(t, c, inst); return hb != nil })
	hb, leaseID := etcdBeat(t, c, inst)
	if hb.Clock != nil || hb.Tier != "" || leaseID == 0 {
		t.Errorf("before any report: clock %+v tier %q lease %x, want no measurement on a lease", hb.Clock, hb.Tier, leaseID)
	}
	ttl, err := c.TimeToLive(ctx, clientv3.LeaseID(leaseID))
	if err != nil || ttl.GrantedTTL < 1 || ttl.GrantedTTL > 3 {
		t.Errorf("heartbeat lease TTL %+v (%v), want 3 intervals rounded up to whole seconds and the server's minimum", ttl, err)
	}

	report := func(off time.Duration) {
		b, err := fleet.EncodeTierReport(&fleet.TierReport{Instance: inst, Offset: off, MeasuredAt: time.Now(), By: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(ctx, fleet.TierEtcdKey(inst), string(b)); err != nil {
			t.Fatal(err)
		}
	}
	report(300 * time.Millisecond)
	eventually(t, "the degrade tier", func() bool { hb, _ := etcdBeat(t, c, inst); return hb.Tier == "degrade" })
	lease, err := g.Acquire(ctx, "lock:stock:1", instrument.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Get(ctx, l.QueuePrefix("lock:stock:1"), clientv3.WithPrefix())
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("lock keys %v (%v)", r, err)
	}
	lt, err := c.TimeToLive(ctx, clientv3.LeaseID(r.Kvs[0].Lease))
	if err != nil || lt.GrantedTTL != 7 {
		t.Errorf("lock lease granted TTL %+v (%v), want the degraded 7s (10s x0.7)", lt, err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	report(700 * time.Millisecond)
	eventually(t, "the reject tier", func() bool { hb, _ := etcdBeat(t, c, inst); return hb.Tier == "reject" })
	if _, err := g.Acquire(ctx, "lock:stock:1"); !errors.Is(err, instrument.ErrClockSkew) {
		t.Fatalf("Acquire: %v, want ErrClockSkew", err)
	}
	hb, _ = etcdBeat(t, c, inst)
	if hb.Clock == nil || hb.Clock.Source != fleet.ClockSourceAgent || hb.Clock.Offset != 700*time.Millisecond {
		t.Errorf("clock sample %+v, want the agent's 700ms", hb.Clock)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if hb, _ := etcdBeat(t, c, inst); hb != nil {
		t.Errorf("heartbeat still on etcd after Close: %+v", hb)
	}
}

// WithoutHeartbeat publishes nothing.
func TestHeartbeat_OffWithAnOption(t *testing.T) {
	c := redisClient(t)
	g, err := instrument.NewGoverned(redisLocker(t, c), instrument.WithoutHeartbeat(), instrument.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 5*time.Second)
	l, err := g.Acquire(ctx, "lock:a:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := redisFleetKeys(t, c); len(keys) != 0 {
		t.Errorf("heartbeat keys %q with the heartbeat off", keys)
	}
}

// Bad heartbeat options are a constructor error.
func TestHeartbeat_BadOptionsAreAnError(t *testing.T) {
	c := redisClient(t)
	_, err := instrument.NewGoverned(redisLocker(t, c), instrument.WithHeartbeat(fleet.WithInterval(time.Microsecond)))
	if !errors.Is(err, instrument.ErrInvalidOption) {
		t.Errorf("NewGoverned with a 1µs interval: %v, want ErrInvalidOption", err)
	}
	if _, err := workerid.NewRedis(c, workerid.WithHeartbeat(fleet.WithInstance("a\nb"))); !errors.Is(err, workerid.ErrInvalid) {
		t.Errorf("NewRedis with a bad instance: %v, want ErrInvalid", err)
	}
}

// A governed Locker dropped without Close ends its share of the heartbeat
// when it is garbage-collected: the publisher holds nothing that keeps it
// alive, and the last share's end deletes the heartbeat.
func TestHeartbeat_StopsWhenTheLastGovernedLockerIsCollected(t *testing.T) {
	c := redisClient(t)
	const inst = "collected"
	func() {
		g, err := instrument.NewGoverned(redisLocker(t, c), instrument.WithLogger(quiet),
			instrument.WithHeartbeat(fleet.WithInstance(inst), fleet.WithInterval(interval)))
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxFor(t, 5*time.Second)
		l, err := g.Acquire(ctx, "lock:gc:1")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}()
	eventually(t, "a heartbeat", func() bool { return redisBeat(t, c, inst) != nil })
	eventually(t, "the collected Locker's heartbeat to be deleted", func() bool {
		runtime.GC()
		n, err := c.Exists(ctxFor(t, 5*time.Second), fleet.RedisKey(inst)).Result()
		return err == nil && n == 0
	})
}

// A process holding and waiting for more locks, with long keys, than fit
// in MaxBeatBytes publishes a heartbeat Decode reads: the newest entries
// are left out (the oldest kept), and Truncated says so. A beat over the
// limit would be refused by the agent, which would take the live process
// for a dead one.
func TestHeartbeat_AHeartbeatOverTheSizeLimitKeepsTheOldestLocksAndDecodes(t *testing.T) {
	c := redisClient(t)
	const inst = "bulky"
	a, err := fleet.Attach(redisLocker(t, c).FleetStore(), fleet.WithInstance(inst), fleet.WithInterval(interval), fleet.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	// 400 held, then 200 waited for (newer), ~520 bytes each: ~300 KiB.
	long := strings.Repeat("x", 480)
	base := time.Now().Add(-time.Hour).UTC()
	const held, waiting = 400, 200
	for i := range held + waiting {
		key := fmt.Sprintf("lock:%s:%d", long, i)
		since := base.Add(time.Duration(i) * time.Second)
		if i < held {
			a.TrackHeld(i, fleet.HeldLock{Key: key, Pattern: "lock:{id}", Backend: "redis", Fence: uint64(i + 1), Since: since})
		} else {
			a.TrackWaiting(i, fleet.WaitingLock{Key: key, Pattern: "lock:{id}", Backend: "redis", Since: since})
		}
	}
	tracked := time.Now()
	var raw []byte
	eventually(t, "a heartbeat sent after every lock was tracked", func() bool {
		b, err := c.Get(ctxFor(t, 5*time.Second), fleet.RedisKey(inst)).Bytes()
		if errors.Is(err, redis.Nil) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		var sent struct {
			SentAt time.Time `json:"sent_at"`
		}
		if err := json.Unmarshal(b, &sent); err != nil {
			t.Fatal(err)
		}
		raw = b
		return sent.SentAt.After(tracked)
	})
	if len(raw) > fleet.MaxBeatBytes {
		t.Fatalf("heartbeat of %d bytes written, over MaxBeatBytes %d: Decode refuses it", len(raw), fleet.MaxBeatBytes)
	}
	hb, err := fleet.Decode(raw)
	if err != nil {
		t.Fatalf("the published heartbeat does not decode: %v", err)
	}
	kept := len(hb.Held) + len(hb.Waiting)
	if !hb.Truncated || kept == 0 || kept == held+waiting {
		t.Fatalf("heartbeat of %d bytes: truncated %v, %d held and %d waiting of %d and %d",
			len(raw), hb.Truncated, len(hb.Held), len(hb.Waiting), held, waiting)
	}
	// The oldest entries are the ones kept: entries 0..kept-1.
	for i, h := range hb.Held {
		if want := fmt.Sprintf("lock:%s:%d", long, i); h.Key != want {
			t.Fatalf("held[%d] is …%s, want entry %d (the oldest kept)", i, h.Key[len(long)+5:], i)
		}
	}
	for i, w := range hb.Waiting {
		if want := fmt.Sprintf("lock:%s:%d", long, held+i); w.Key != want {
			t.Fatalf("waiting[%d] is …%s, want entry %d (the oldest kept)", i, w.Key[len(long)+5:], held+i)
		}
	}
	// It is cut no further than it has to be: one more entry would not fit.
	if free := fleet.MaxBeatBytes - len(raw); free > len(long)+200 {
		t.Errorf("heartbeat of %d bytes keeps %d of %d entries: %d bytes to spare, room for another", len(raw), kept, held+waiting, free)
	}
}

// A store far away (here a round trip of about 120 ms, through the fault
// proxy) with a 1 s interval, so a 500 ms timeout: the clock samples must
// leave the write its share of the timeout. They once took all of it (five
// samples of a fifth each), and no beat was ever written: the process was
// invisible to the agent, its live locks holder_dead.
func TestHeartbeat_AStoreFarAwayStillGetsItsBeat(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	direct := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { _ = direct.Close() })
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil { // a connection before the latency
		t.Fatal(err)
	}
	p.SetLatency(60 * time.Millisecond)
	a, err := fleet.Attach(redisLocker(t, c).FleetStore(), fleet.WithInstance("far"), fleet.WithInterval(time.Second), fleet.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := direct.Exists(ctx, fleet.RedisKey("far")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat written in 10 beats through a store with a 120 ms round trip and a 500 ms timeout")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// farAway is a client of a fresh Redis through the fault proxy with the
// given one-way latency (a round trip of twice it), its connection made
// before the latency, and a direct client of the same Redis.
func farAway(t *testing.T, oneWay time.Duration) (far, direct *redis.Client) {
	t.Helper()
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	direct = redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { _ = direct.Close() })
	far = redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = far.Close() })
	if err := far.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	p.SetLatency(oneWay)
	return far, direct
}

// A store whose round trip (160 ms) is a third of the timeout (500 ms at a
// 1 s interval): one clock sample and the write take 320 ms, yet no beat is
// ever written. The samples' half of the timeout ends inside the second
// sample; the client drops the connection whose read the deadline cut, and
// the write, on a new connection (its handshake round trips, then SET), is
// out of time as well. Every beat: the agent sees the process as gone.
func TestHeartbeat_AStoreAThirdOfTheTimeoutAwayGetsItsBeats(t *testing.T) {
	c, direct := farAway(t, 80*time.Millisecond)
	a, err := fleet.Attach(redisLocker(t, c).FleetStore(), fleet.WithInstance("far"), fleet.WithInterval(time.Second), fleet.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := direct.Exists(ctx, fleet.RedisKey("far")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat written in 10 s through a store with a 160 ms round trip and a 500 ms timeout")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The store of TestHeartbeat_AStoreFarAwayStillGetsItsBeat (120 ms round
// trip, 500 ms timeout) gets its beats, but its clock is measured once: the
// samples' deadline cuts a sample and the client drops its connection, and
// from the next beat on every sample starts with a new connection's
// handshake, which the half timeout never fits. A clock that then jumps
// 3 s ahead stays at the first offset (tier ok) for as long as the process
// runs: its locks and IDs go on as if its clock were right.
func TestHeartbeat_AFarStoresClockIsMeasuredAgain(t *testing.T) {
	c, _ := farAway(t, 60*time.Millisecond)
	var off atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(off.Load())) }
	a, err := fleet.Attach(redisLocker(t, c).FleetStore(), fleet.WithInstance("far"), fleet.WithInterval(time.Second),
		fleet.WithClock(clock), fleet.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	eventually(t, "a first clock sample", func() bool { _, ok := a.Skew(); return ok })
	off.Store(int64(3 * time.Second))
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := a.Skew()
		if got > 2*time.Second && a.Tier() == policy.TierReject {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the clock jumped 3 s ahead 10 beats ago; measured offset still %v, tier %v", got, a.Tier())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
