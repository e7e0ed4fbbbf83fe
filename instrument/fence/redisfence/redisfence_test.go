package redisfence_test

import (
	"context"
	"errors"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fence"
	"github.com/lockgov/lockgov/instrument/fence/redisfence"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

func timeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newWriter(t testing.TB, c redis.UniversalClient) *redisfence.Writer {
	t.Helper()
	w, err := redisfence.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func wantStale(t *testing.T, err error, stored, offered uint64) {
	t.Helper()
	var se *fence.StaleFenceError
	if !errors.Is(err, fence.ErrStaleFence) || !errors.As(err, &se) {
		t.Fatalf("err = %v, want ErrStaleFence", err)
	}
	if se.Stored != stored || se.Offered != offered || se.Store != "redis" {
		t.Fatalf("StaleFenceError %+v, want stored %d offered %d", se, stored, offered)
	}
}

func TestSet_AppliesAboveAndRefusesAtOrBelowTheStoredFence(t *testing.T) {
	c := testenv.NewRedis(t).Client(t)
	w := newWriter(t, c)
	ctx := timeout(t, 10*time.Second)
	if err := w.Set(ctx, "stock:{sku-1}", "10", 100, 0); err != nil {
		t.Fatal(err)
	}
	wantStale(t, w.Set(ctx, "stock:{sku-1}", "9", 100, 0), 100, 100)
	wantStale(t, w.Set(ctx, "stock:{sku-1}", "8", 99, 0), 100, 99)
	// 1000 > 999 numerically but not as strings of equal treatment: the
	// script compares length first.
	if err := w.Set(ctx, "stock:{sku-1}", "7", 1000, 0); err != nil {
		t.Fatalf("fence 1000 over 100: %v", err)
	}
	wantStale(t, w.Set(ctx, "stock:{sku-1}", "6", 999, 0), 1000, 999)
	v, f, err := w.Get(ctx, "stock:{sku-1}")
	if err != nil || v != "7" || f != 1000 {
		t.Fatalf("Get = %q %d %v, want 7 1000", v, f, err)
	}
	// Fences above 2^53 (where Lua doubles stop being exact) still order.
	big := uint64(math.MaxUint64 - 1)
	if err := w.Set(ctx, "k", "a", big, 0); err != nil {
		t.Fatal(err)
	}
	wantStale(t, w.Set(ctx, "k", "b", big, 0), big, big)
	if err := w.Set(ctx, "k", "c", math.MaxUint64, 0); err != nil {
		t.Fatalf("MaxUint64 over MaxUint64-1: %v", err)
	}
	if _, _, err := w.Get(ctx, "absent"); !errors.Is(err, redis.Nil) {
		t.Fatalf("Get absent = %v, want redis.Nil", err)
	}
	// The fence lives in the value's slot, not in the value.
	if got, _ := c.Get(ctx, "stock:{sku-1}").Result(); got != "7" {
		t.Fatalf("raw GET = %q, want the bare value", got)
	}
}

func TestSet_ValueAndFenceExpireTogether(t *testing.T) {
	c := testenv.NewRedis(t).Client(t)
	w := newWriter(t, c)
	ctx := timeout(t, 10*time.Second)
	if err := w.Set(ctx, "session", "x", 5, time.Minute); err != nil {
		t.Fatal(err)
	}
	fk, _ := redisfence.FenceKey("session")
	for _, k := range []string{"session", fk} {
		if ttl, err := c.PTTL(ctx, k).Result(); err != nil || ttl <= 0 || ttl > time.Minute {
			t.Fatalf("PTTL %s = %v %v, want (0, 1m]", k, ttl, err)
		}
	}
}

func TestSet_BadInputWritesNothing(t *testing.T) {
	c := testenv.NewRedis(t).Client(t)
	w := newWriter(t, c)
	ctx := timeout(t, 10*time.Second)
	cases := []struct {
		key string
		f   uint64
		ttl time.Duration
	}{
		{"k", 0, 0},
		{"", 1, 0},
		{"a}b", 1, 0},
		{"a{}b", 1, 0},
		{"k", 1, -time.Second},
		{"k", 1, time.Microsecond},
	}
	for _, tc := range cases {
		if err := w.Set(ctx, tc.key, "v", tc.f, tc.ttl); err == nil {
			t.Errorf("Set(%q, fence %d, ttl %v) accepted", tc.key, tc.f, tc.ttl)
		}
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE = %d %v after refused calls, want 0", n, err)
	}
	if _, err := redisfence.New(nil); err == nil {
		t.Fatal("New(nil) accepted")
	}
}

func TestFenceKey_SameSlotAsTheValue(t *testing.T) {
	for key, want := range map[string]string{
		"stock:{sku-1}": "stock:{sku-1}:fenced",
		"plain":         "{plain}:fenced",
	} {
		got, err := redisfence.FenceKey(key)
		if err != nil || got != want {
			t.Errorf("FenceKey(%q) = %q %v, want %q", key, got, err, want)
		}
	}
}

// TestSet_OnRedisCluster runs the script on a 3-primary Cluster, for keys
// with and without a hash tag: a CROSSSLOT error would fail it.
func TestSet_OnRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := testenv.NewRedisCluster(t, 3).Client(t)
	w := newWriter(t, c)
	ctx := timeout(t, 30*time.Second)
	for _, key := range []string{"stock:{sku-1}", "plain-key", "other"} {
		if err := w.Set(ctx, key, "v1", 2, 0); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		wantStale(t, w.Set(ctx, key, "v0", 1, 0), 2, 1)
		if v, f, err := w.Get(ctx, key); err != nil || v != "v1" || f != 2 {
			t.Fatalf("%s: Get = %q %d %v", key, v, f, err)
		}
	}
}

// TestSet_StaleHolderIsRefusedAfterTakeover: a holder whose lease ran out
// (no watchdog, TTL passed) writes after the next holder: its write is
// refused with the next holder's fence.
func TestSet_StaleHolderIsRefusedAfterTakeover(t *testing.T) {
	c := testenv.NewRedis(t).Client(t)
	w := newWriter(t, c)
	l, err := redislock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := timeout(t, 30*time.Second)
	old, err := l.Acquire(ctx, "lock:stock:{sku-1}", instrument.WithTTL(200*time.Millisecond), instrument.WithoutWatchdog())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Release(ctx) }()
	<-old.Context().Done() // the old holder's lease ends: it would not know if it were paused
	next, err := l.Acquire(ctx, "lock:stock:{sku-1}", instrument.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = next.Release(ctx) }()
	if err := w.Set(ctx, "stock:{sku-1}", "new", next.Fence(), 0); err != nil {
		t.Fatal(err)
	}
	wantStale(t, w.Set(ctx, "stock:{sku-1}", "old", old.Fence(), 0), next.Fence(), old.Fence())
}

// TestSet_ConcurrentWritersOnlyTheHighestFenceWins: 32 writers with fences
// 1..32 race; the key ends with fence 32's value.
func TestSet_ConcurrentWritersOnlyTheHighestFenceWins(t *testing.T) {
	c := testenv.NewRedis(t).Client(t)
	w := newWriter(t, c)
	ctx := timeout(t, 30*time.Second)
	var wg sync.WaitGroup
	for f := uint64(1); f <= 32; f++ {
		wg.Go(func() {
			err := w.Set(ctx, "k", "v"+string(rune('A'+f-1)), f, 0)
			var se *fence.StaleFenceError
			if err != nil && (!errors.As(err, &se) || se.Stored < f) {
				t.Errorf("fence %d: %v", f, err)
			}
		})
	}
	wg.Wait()
	if v, f, err := w.Get(ctx, "k"); err != nil || f != 32 || v != "v"+string(rune('A'+31)) {
		t.Fatalf("Get = %q %d %v, want fence 32's value", v, f, err)
	}
}

// TestSet_ResentAfterALostReplyReportsWritten: the script ran, its reply was
// lost, and go-redis resent it on another connection. The resend finds this
// fence and value stored: Set must return nil, not a StaleFenceError that
// would tell the holder its write was refused (and have it undo work whose
// write is the one stored). Another value under the same fence is still
// refused.
func TestSet_ResentAfterALostReplyReportsWritten(t *testing.T) {
	p := testenv.NewProxy(t, testenv.NewRedis(t).Addr())
	c := testenv.NewLostReplyClient(t, p.Addr())
	w := newWriter(t, c)
	ctx := timeout(t, 30*time.Second)
	// Load the script: the dropped reply must be set.lua's, not a NOSCRIPT
	// that go-redis answers with EVAL.
	if err := w.Set(ctx, "warm", "x", 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Set(ctx, "stock:{sku-1}", "10", 100, 0); err != nil {
		t.Fatal(err)
	}
	dropped := p.DropNextReply()
	if err := w.Set(ctx, "stock:{sku-1}", "9", 101, 0); err != nil {
		t.Fatalf("Set whose reply was lost and resent: %v, want nil (it was applied)", err)
	}
	select {
	case <-dropped:
	default:
		t.Fatal("no reply was dropped: the scenario did not happen")
	}
	if v, f, err := w.Get(ctx, "stock:{sku-1}"); err != nil || v != "9" || f != 101 {
		t.Fatalf("Get = %q %d %v, want 9 101", v, f, err)
	}
	wantStale(t, w.Set(ctx, "stock:{sku-1}", "8", 101, 0), 101, 101)
}

// TestSet_ResentAfterANewerHolderWroteIsRefused: the Set ran, its reply was
// lost, a newer holder wrote under a higher fence, and then go-redis resent
// the Set. The resend must not write the older value back over the newer
// holder's: it is refused with the newer fence stored, and the newer value
// stays. (The first run did apply; the caller's lease has moved on, which is
// what the StaleFenceError tells it.)
func TestSet_ResentAfterANewerHolderWroteIsRefused(t *testing.T) {
	src, err := os.ReadFile("set.lua")
	if err != nil {
		t.Fatal(err)
	}
	r := testenv.NewRedis(t)
	ctx := timeout(t, 30*time.Second)
	newer := newWriter(t, r.Client(t))
	c := r.Client(t)
	h := &testenv.ResendOnce{SHA: testenv.ScriptSHA(string(src)), Between: func() {
		if err := newer.Set(ctx, "stock:{sku-2}", "7", 102, 0); err != nil {
			t.Errorf("the newer holder's Set: %v", err)
		}
	}}
	c.AddHook(h)
	w := newWriter(t, c)
	if err := w.Set(ctx, "stock:{sku-2}", "10", 100, 0); err != nil { // loads the script
		t.Fatal(err)
	}
	h.Arm()
	wantStale(t, w.Set(ctx, "stock:{sku-2}", "9", 101, 0), 102, 101)
	if !h.Resent() {
		t.Fatal("the Set was not run twice: the scenario did not happen")
	}
	if v, f, err := w.Get(ctx, "stock:{sku-2}"); err != nil || v != "7" || f != 102 {
		t.Fatalf("Get = %q %d %v, want the newer holder's 7 102", v, f, err)
	}
}
