package detectors_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/fleet/redisstore"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// fallbackChildEnv makes the test binary a governed process whose lock
// store is down: "LOCKADDR BEATADDR INSTANCE HELD WANTED".
const fallbackChildEnv = "LOCKGOV_TEST_FALLBACK_DEADLOCK_CHILD"

// beatsElsewhere publishes the heartbeat of a Locker into another store
// than its locks' (etcd locks with Redis heartbeats, a quorum with one
// node down): the beats get through while the lock store is down.
type beatsElsewhere struct {
	*redislock.Locker
	beats fleet.Store
}

func (b beatsElsewhere) FleetStore() fleet.Store { return b.beats }

// TestMain_FallbackDeadlockChild is the child's body; it does nothing in
// the parent.
func TestMain_FallbackDeadlockChild(t *testing.T) {
	spec := os.Getenv(fallbackChildEnv)
	if spec == "" {
		t.Skip("runs only as the child process of TestDeadlock_FallbackLocksOfTwoRealProcessesAreNoDeadlock")
	}
	f := strings.Fields(spec)
	lockAddr, beatAddr, instance, held, wanted := f[0], f[1], f[2], f[3], f[4]
	lc := redis.NewClient(&redis.Options{Addr: lockAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer lc.Close()
	bc := redis.NewClient(&redis.Options{Addr: beatAddr, ContextTimeoutEnabled: true})
	defer bc.Close()
	raw, err := redislock.New(lc, redislock.WithService("inventory"), redislock.WithInstance(instance))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	g, err := instrument.NewGoverned(beatsElsewhere{raw, redisstore.New(bc)},
		instrument.WithStoreFailure(instrument.FailOpen),
		instrument.WithHeartbeat(fleet.WithInstance(instance), fleet.WithService("inventory"), fleet.WithInterval(200*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Another goroutine's hold of WANTED (this process's fallback lock),
	// which it keeps until the parent kills the process; then hold HELD
	// and wait for WANTED, which only that hold blocks.
	other, err := g.Acquire(ctx, wanted)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(context.Background())
	err = instrument.Do(ctx, g, held, func(ctx context.Context) error {
		_, err := g.Acquire(ctx, wanted)
		return err
	})
	t.Log(err)
}

// TestDeadlock_FallbackLocksOfTwoRealProcessesAreNoDeadlock: the lock
// store is down and two governed processes run under FailOpen, with their
// heartbeats in a store that is up. a holds apple and waits for pear, b
// holds pear and waits for apple, each on its own process-local lock (in
// each, another goroutine holds the key it waits for). Both beats show it
// (marked fallback) and prove the waits coexisted; the deadlock detector
// reports no deadlock: neither waits for the other. (It reported one: the
// fallback entries read as the store's locks.) The code takes the two
// keys in both orders, which stays a lock-order inversion.
func TestDeadlock_FallbackLocksOfTwoRealProcessesAreNoDeadlock(t *testing.T) {
	t.Parallel()
	if os.Getenv(fallbackChildEnv) != "" {
		t.Skip("child")
	}
	locks := testenv.NewRedis(t)
	if err := locks.Kill(); err != nil {
		t.Fatal(err)
	}
	c := newRedis(t) // the heartbeats' store
	start := func(instance, held, wanted string) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMain_FallbackDeadlockChild$", "-test.v")
		cmd.Env = append(os.Environ(), fallbackChildEnv+"="+strings.Join([]string{locks.Addr(), c.Options().Addr, instance, held, wanted}, " "))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	ctx := timeout(t, 2*time.Minute)
	start("proc-a", "lock:stock:apple", "lock:stock:pear")
	start("proc-b", "lock:stock:pear", "lock:stock:apple")
	for _, hb := range waitBeatsWaiting(t, ctx, c, "proc-a", "proc-b") {
		for _, h := range hb.Held {
			if !h.Fallback {
				t.Errorf("%s: held %+v not marked fallback", hb.Instance, h)
			}
		}
		if !hb.Waiting[0].Fallback {
			t.Errorf("%s: waiting %+v not marked fallback", hb.Instance, hb.Waiting[0])
		}
	}
	d, err := detectors.NewDeadlock(redisStore(t, c))
	if err != nil {
		t.Fatal(err)
	}
	fs := detect(t, ctx, d)
	if dl := byKind(fs, detectors.KindDeadlock); len(dl) != 0 {
		t.Fatalf("a deadlock between two processes' fallback locks:%s", describe(dl))
	}
	if inv := byKind(fs, detectors.KindLockOrderInversion); len(inv) != 1 {
		t.Fatalf("%d lock_order_inversion findings, want 1 (the code takes apple and pear in both orders):%s", len(inv), describe(fs))
	}
}

// waitBeatsWaiting waits for beats of instances that each show two holds
// and one wait, all of which began before the oldest of the beats was
// sent: the beats a deadlock detector acts on.
func waitBeatsWaiting(t *testing.T, ctx context.Context, c *redis.Client, instances ...string) []*fleet.Heartbeat {
	t.Helper()
	for {
		var beats []*fleet.Heartbeat
		var latest, oldest time.Time
		for _, inst := range instances {
			v, err := c.Get(ctx, fleet.RedisKey(inst)).Bytes()
			if err != nil {
				break
			}
			hb, err := fleet.Decode(v)
			if err != nil {
				t.Fatal(err)
			}
			if len(hb.Held) != 2 || len(hb.Waiting) != 1 {
				break
			}
			beats = append(beats, hb)
			if oldest.IsZero() || hb.SentAt.Before(oldest) {
				oldest = hb.SentAt
			}
			for _, h := range hb.Held {
				latest = later(latest, h.Since)
			}
			latest = later(latest, hb.Waiting[0].Since)
		}
		if len(beats) == len(instances) && !latest.After(oldest) {
			return beats
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%v never published holds and waits that coexisted", instances)
		case <-time.After(20 * time.Millisecond): // polling the store, with a deadline
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
