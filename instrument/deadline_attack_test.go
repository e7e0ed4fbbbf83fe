package instrument_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// attackReadTimeout is the client's read timeout in the deadline attacks: a
// caller whose deadline comes no later than a read timeout after it called
// gets its own deadline as the socket's (ContextTimeoutEnabled), so its
// error can only come once its deadline has passed.
const attackReadTimeout = 300 * time.Millisecond

// blackholeFixture is a FailOpen Governed redislock whose client reaches a
// real redis-server through a fault proxy, with a warm connection pool (a
// blackholed proxy still accepts connections, but no handshake is wanted).
type blackholeFixture struct {
	redis  *testenv.Redis
	proxy  *testenv.Proxy
	client *redis.Client
	locker *instrument.Governed
	reg    *prometheus.Registry
}

func newBlackholeFixture(t *testing.T) *blackholeFixture {
	t.Helper()
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr())
	c := testenv.NewDeadlineClient(t, p.Addr(), attackReadTimeout)
	raw, err := redislock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	reg := prometheus.NewRegistry()
	g, err := instrument.NewGoverned(raw, instrument.WithStoreFailure(instrument.FailOpen), instrument.WithRegisterer(reg), instrument.WithoutHeartbeat())
	if err != nil {
		t.Fatal(err)
	}
	ctx := withTimeout(t, 10*time.Second)
	// The scripts are loaded and the pool holds enough connections.
	l, err := g.Acquire(ctx, "lock:warm:1", instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// One connection at a time, each held until all are open: 64 handshakes at
	// once could each outlast the 300ms read timeout on a loaded machine.
	conns := make([]*redis.Conn, 0, 64)
	for range 64 {
		cn := c.Conn()
		conns = append(conns, cn)
		if err := cn.Ping(ctx).Err(); err != nil {
			t.Error(err)
			break
		}
	}
	for _, cn := range conns {
		_ = cn.Close() // back to the pool
	}
	if t.Failed() {
		t.FailNow()
	}
	return &blackholeFixture{redis: r, proxy: p, client: c, locker: g, reg: reg}
}

// TestDeadlineAttack_BlackholedRedisDegradesOnlyCallersWithTimeLeft: Redis
// stops answering (a blackhole: connections stay open, nothing comes back).
// Many callers at once, Acquire and Do, FailFast and waiting, each with its
// own deadline: those whose deadline is at most the read timeout can only
// fail on their own deadline, so they must get an error, never a degraded
// lease, and Do must not run fn for them; those with seconds left must get a
// process-local lease (fence 0) and Do must run fn; those just past the read
// timeout may go either way. Every degraded decision is counted once, and
// only granted callers are counted.
//
// Not parallel: its margins are the 300ms read timeout against the callers'
// deadlines; it runs before the package's parallel tests, not among them.
func TestDeadlineAttack_BlackholedRedisDegradesOnlyCallersWithTimeLeft(t *testing.T) {
	f := newBlackholeFixture(t)
	f.proxy.Blackhole(true)

	const n = 60
	type result struct {
		budget  time.Duration
		granted bool
		fence   uint64
		ran     bool
		err     error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	budgets := testenv.DeadlineBudgets(n, attackReadTimeout)
	for i := range n {
		budget := budgets[i]
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			key := fmt.Sprintf("lock:order:%d", i)
			res := result{budget: budget}
			var opts []instrument.AcquireOption
			if i%2 == 0 {
				opts = append(opts, instrument.FailFast())
			}
			if i%4 < 2 {
				l, err := f.locker.Acquire(ctx, key, opts...)
				res.err = err
				if err == nil {
					res.granted, res.fence = true, l.Fence()
					if rerr := l.Release(context.Background()); rerr != nil {
						t.Errorf("caller %d: release of a degraded lease: %v", i, rerr)
					}
				}
			} else {
				res.err = instrument.Do(ctx, f.locker, key, func(context.Context) error {
					res.ran = true
					return nil
				}, opts...)
				res.granted = res.ran
			}
			results[i] = res
		})
	}
	wg.Wait()

	granted := 0
	for i, r := range results {
		if r.granted {
			granted++
			if r.fence != 0 {
				t.Errorf("caller %d: fence %d from a blackholed Redis", i, r.fence)
			}
		}
		switch {
		case r.budget <= attackReadTimeout && (r.granted || r.ran || r.err == nil):
			t.Errorf("caller %d (deadline %s, read timeout %s): granted %v, fn ran %v, err %v; its deadline was taken for a store failure",
				i, r.budget, attackReadTimeout, r.granted, r.ran, r.err)
		case r.budget == testenv.TimeLeft && !r.granted:
			t.Errorf("caller %d (deadline %s): %v; Redis did not answer within the read timeout and the caller had time: want a degraded grant", i, r.budget, r.err)
		}
	}
	if got := degradedLocks(t, f.reg); got != float64(granted) {
		t.Fatalf("lockgov_store_degraded_total{component=lock} = %v, want %d (one per degraded grant, none for callers past their deadline)", got, granted)
	}

	// Redis answers again: Govern uses it again.
	f.proxy.Blackhole(false)
	ctx := withTimeout(t, 10*time.Second)
	testenv.WaitFor(t, 10*time.Second, "Redis through the proxy", func() bool { return f.client.Ping(ctx).Err() == nil })
	l, err := f.locker.Acquire(ctx, "lock:order:after")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Fence() == 0 {
		t.Fatal("after the blackhole ended the lease is process-local")
	}
}

// TestDeadlineAttack_LostReplyIsNotADegradedGrantPastTheDeadline: the
// acquire reaches Redis and runs (the lock may now be held there), and its
// reply is lost. A caller whose deadline comes before the read timeout sees
// its own deadline: it must get an error and no process-local lease. A
// caller with time left past the read timeout sees a store that did not
// answer and degrades, as FailOpen documents.
//
// Not parallel: its margins are the 300ms read timeout against the callers'
// deadlines; it runs before the package's parallel tests, not among them.
func TestDeadlineAttack_LostReplyIsNotADegradedGrantPastTheDeadline(t *testing.T) {
	f := newBlackholeFixture(t)
	direct := f.redis.Client(t)
	// Each failed Acquire gives back in the background what its attempt
	// may have taken (redislock's leave). The next reply the proxy drops
	// must be the next Acquire's, not that leave's: each round waits for
	// the last round's leave to have succeeded.
	leaves := &leaveCounter{}
	f.client.AddHook(leaves)

	for i, budget := range []time.Duration{50 * time.Millisecond, 150 * time.Millisecond, attackReadTimeout} {
		testenv.WaitFor(t, 10*time.Second, "the last round's leave", func() bool { return leaves.ok.Load() == int64(i) })
		dropped := f.proxy.DropNextReply()
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		key := fmt.Sprintf("lock:lost:%d", i)
		l, err := f.locker.Acquire(ctx, key, instrument.FailFast())
		cancel()
		select {
		case <-dropped:
		default:
			t.Fatalf("deadline %s: no reply was dropped, the attack did not happen", budget)
		}
		if err == nil {
			_ = l.Release(context.Background())
			t.Fatalf("deadline %s, reply lost: granted a lease (fence %d) to a caller past its deadline", budget, l.Fence())
		}
		if got := degradedLocks(t, f.reg); got != 0 {
			t.Fatalf("deadline %s, reply lost: degraded = %v, want 0 (%v)", budget, got, err)
		}
		keys, kerr := direct.Keys(withTimeout(t, 5*time.Second), "*").Result()
		t.Logf("deadline %s: %v; keys in Redis after the lost reply: %v (%v)", budget, err, keys, kerr)
	}

	testenv.WaitFor(t, 10*time.Second, "the last round's leave", func() bool { return leaves.ok.Load() == 3 })
	dropped := f.proxy.DropNextReply()
	ctx := withTimeout(t, 10*time.Second)
	l, err := f.locker.Acquire(ctx, "lock:lost:long", instrument.FailFast())
	<-dropped
	if err != nil {
		t.Fatalf("caller with time left, reply lost: %v, want a degraded lease", err)
	}
	defer l.Release(ctx)
	if l.Fence() != 0 {
		t.Fatalf("caller with time left, reply lost: fence %d, want a process-local lease", l.Fence())
	}
	if got := degradedLocks(t, f.reg); got != 1 {
		t.Fatalf("degraded = %v, want 1", got)
	}
}

// leaveCounter counts the leave.lua runs (EVALSHA or EVAL with four keys)
// that succeeded through a client.
type leaveCounter struct{ ok atomic.Int64 }

func (h *leaveCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *leaveCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *leaveCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		if err == nil && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(a) > 2 && fmt.Sprint(a[2]) == "4" {
			h.ok.Add(1)
		}
		return err
	}
}
