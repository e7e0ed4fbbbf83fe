package redislock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// acquireRelease takes key once and gives it back, returning the fence.
func acquireRelease(t *testing.T, l *redislock.Locker, ctx context.Context, key string) uint64 {
	t.Helper()
	lease, err := l.Acquire(ctx, key, instrument.FailFast())
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release(%q): %v", key, err)
	}
	return lease.Fence()
}

// infoField returns one "name:value" field of INFO section.
func infoField(t *testing.T, ctx context.Context, c *redis.Client, section, name string) string {
	t.Helper()
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestFailover_FenceAboveEveryFenceTheLostPrimaryIssued is the scenario of
// a promoted replica that lagged: the fence counter it has is present but
// stale. B's fence on the new primary must still be above the fence A holds
// from the old one, or a fenced resource accepts A's late write after B's.
func TestFailover_FenceAboveEveryFenceTheLostPrimaryIssued(t *testing.T) {
	t.Parallel()
	// No delay before the full sync the replica asks for (default 5s).
	primary := testenv.NewRedis(t, testenv.WithRedisArgs("--repl-diskless-sync-delay", "0"))
	link := testenv.NewProxy(t, primary.Addr())
	_, port, _ := strings.Cut(link.Addr(), ":")
	replica := testenv.NewRedis(t, testenv.WithRedisArgs("--replicaof", "127.0.0.1", port))
	cp, cr := newClient(t, primary.Addr()), newClient(t, replica.Addr())
	ctx := timeout(t, time.Minute)
	waitFor(t, ctx, "the replica to sync", func() bool {
		return infoField(t, ctx, cr, "replication", "master_link_status") == "up"
	})

	la := newLocker(t, cp)
	const key = "lock:failover"
	acquireRelease(t, la, ctx, key)
	acquireRelease(t, la, ctx, key)
	if n, err := cp.Wait(ctx, 1, 10_000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas acknowledged, err %v", n, err)
	}
	// The replica has everything so far; nothing written from now on
	// reaches it.
	if err := link.Close(); err != nil {
		t.Fatal(err)
	}
	acquireRelease(t, la, ctx, key)
	a, err := la.Acquire(ctx, key, instrument.FailFast(), instrument.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)

	if err := cr.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("promote the replica: %v", err)
	}
	lb := newLocker(t, cr)
	b, err := lb.Acquire(ctx, key, instrument.FailFast())
	if err != nil {
		t.Fatalf("B on the promoted replica: %v", err)
	}
	defer b.Release(ctx)
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d on the promoted replica is not above A's %d from the lost primary", b.Fence(), a.Fence())
	}
}

// TestRestartFromOldSnapshot_FenceAboveEveryFenceIssued restarts Redis from
// an RDB snapshot taken before the last two fences were issued: the counter
// it loads is present but stale.
func TestRestartFromOldSnapshot_FenceAboveEveryFenceIssued(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	c := newClient(t, r.Addr())
	l := newLocker(t, c)
	ctx := timeout(t, time.Minute)
	const key = "lock:snapshot"
	acquireRelease(t, l, ctx, key)
	acquireRelease(t, l, ctx, key)
	if err := c.Save(ctx).Err(); err != nil {
		t.Fatalf("SAVE: %v", err)
	}
	acquireRelease(t, l, ctx, key)
	last := acquireRelease(t, l, ctx, key)
	if err := r.Restart(); err != nil { // loads the snapshot from its directory
		t.Fatal(err)
	}
	if got := c.Exists(ctx, "{"+key+"}:fence").Val(); got != 1 {
		t.Fatalf("the restarted server has no fence counter (EXISTS %d): the test checks nothing", got)
	}
	next := acquireRelease(t, l, ctx, key)
	if next <= last {
		t.Fatalf("fence %d after the restart is not above %d issued before it", next, last)
	}
}

// TestFence_StaleCounterIsMovedUp writes an old value into the counter
// (what a lossy restart leaves) and checks that the next fence is above
// every fence issued, that the counter is moved up to it and that it is
// still under a TTL.
func TestFence_StaleCounterIsMovedUp(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "fair"}[fair], func(t *testing.T) {
			t.Parallel()
			_, c := setup(t)
			var opts []redislock.Option
			if fair {
				opts = append(opts, redislock.Fair())
			}
			l := newLocker(t, c, opts...)
			ctx := timeout(t, 30*time.Second)
			const key, counter = "lock:stale", "{lock:stale}:fence"
			first := acquireRelease(t, l, ctx, key)
			if err := c.Set(ctx, counter, strconv.FormatUint(first-1000, 10), time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			next := acquireRelease(t, l, ctx, key)
			if next <= first {
				t.Fatalf("fence %d after a stale counter is not above %d", next, first)
			}
			if got, _ := c.Get(ctx, counter).Uint64(); got != next {
				t.Fatalf("counter %d after issuing fence %d", got, next)
			}
			if ttl := c.PTTL(ctx, counter).Val(); ttl <= 0 {
				t.Fatalf("counter PTTL %v: not under a TTL", ttl)
			}
		})
	}
}

// TestNextFence_MicrosecondsKeepTheirZeros checks how next_fence spells a
// fence from TIME's reply, whose microseconds come without leading zeros:
// 5123 µs past a second is ...005123, not ...5123, or fences would jump
// back by up to a second's worth within every second. Each case starts from
// no counter, so the fence is the clock's.
func TestNextFence_MicrosecondsKeepTheirZeros(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	ctx := timeout(t, 10*time.Second)
	probe := redis.NewScript(redislock.AcquireLibSrc + `
local fence, f = next_fence({ARGV[1], ARGV[2]}, KEYS[1], 60000)
redis.call('DEL', KEYS[1])
return {f, tostring(fence == tonumber(f))}`)
	for _, tc := range []struct{ sec, usec, want string }{
		{"1764619200", "0", "1764619200000000"},
		{"1764619200", "7", "1764619200000007"},
		{"1764619200", "5123", "1764619200005123"},
		{"1764619200", "999999", "1764619200999999"},
		{"2000000000", "100000", "2000000000100000"},
	} {
		got, err := probe.Run(ctx, c, []string{"{lock:nf}:fence"}, tc.sec, tc.usec).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != tc.want || got[1] != "true" {
			t.Errorf("next_fence(%s s, %s µs) = %q (number agrees: %s), want %s", tc.sec, tc.usec, got[0], got[1], tc.want)
		}
	}
}
