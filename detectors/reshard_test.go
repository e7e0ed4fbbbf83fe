package detectors_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/internal/testenv"
)

// scanHook runs before on each SCAN of the heartbeat prefix that a node
// client sends, and after once it returned.
type scanHook struct {
	addr          string
	before, after func(addr string) error
}

func (h scanHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h scanHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h scanHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		isBeatScan := cmd.Name() == "scan" && strings.Contains(cmd.String(), fleet.RedisPrefix)
		if isBeatScan && h.before != nil {
			if err := h.before(h.addr); err != nil {
				return err
			}
		}
		err := next(ctx, cmd)
		if isBeatScan && h.after != nil {
			_ = h.after(h.addr)
		}
		return err
	}
}

// TestLocks_Reshard runs the Locks detector on a Cluster whose slots are
// resharded under it (one cluster for both cases).
func TestLocks_Reshard(t *testing.T) {
	t.Parallel()
	cl := testenv.NewRedisCluster(t, 3)
	t.Run("HeartbeatMovedBetweenNodeScansIsNotHolderDead", func(t *testing.T) {
		testHeartbeatMovedBetweenNodeScansIsNotHolderDead(t, cl)
	})
	t.Run("DetectDuringASlotMigration", func(t *testing.T) { testDetectDuringASlotMigration(t, cl) })
}

// testHeartbeatMovedBetweenNodeScansIsNotHolderDead: the agent reads
// heartbeats by SCANning every Cluster primary. A resharding that moves a
// live process's heartbeat key from a node not yet scanned to one already
// scanned hides the key from that read. The process's lock (with a TTL,
// renewed) must not be reported holder_dead: "a lock held by a live
// process is never a finding", and the finding's action tells the
// operator to free it.
func testHeartbeatMovedBetweenNodeScansIsNotHolderDead(t *testing.T, cl *testenv.RedisCluster) {
	ctx := timeout(t, time.Minute)
	beatKey := fleet.RedisKey("pod-live")
	slot, err := cl.KeySlot(beatKey)
	if err != nil {
		t.Fatal(err)
	}
	from, err := cl.SlotOwner(slot)
	if err != nil {
		t.Fatal(err)
	}
	to := cl.OtherPrimary(from)

	var mu sync.Mutex
	armed := false
	targetScanned := make(chan struct{})
	var once sync.Once
	before := func(addr string) error {
		mu.Lock()
		a := armed
		mu.Unlock()
		if !a || addr != from.Addr() {
			return nil
		}
		// The source is about to be scanned: wait until the target has
		// been, then move the slot (the heartbeat with it) there.
		select {
		case <-targetScanned:
		case <-time.After(20 * time.Second):
			return errors.New("test: the target was not scanned")
		}
		return cl.MigrateSlot(slot, to, 10, nil)
	}
	after := func(addr string) error {
		mu.Lock()
		a := armed
		mu.Unlock()
		if a && addr == to.Addr() {
			once.Do(func() { close(targetScanned) })
		}
		return nil
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true,
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, MaxRetries: 3})
	c.OnNewNode(func(n *redis.Client) { n.AddHook(scanHook{n.Options().Addr, before, after}) })
	t.Cleanup(func() { _ = c.Close() })

	// pod-live, on another host, holds lock:dead:2 under a TTL and
	// publishes heartbeats.
	if err := c.Set(ctx, "lock:dead:2", deadValue("pod-live", 42), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	putBeat(t, ctx, c, otherBeat("pod-live", 42))
	d, err := detectors.NewLocks(redisStore(t, c), detectors.WithPolicy(loadPolicy(t)))
	if err != nil {
		t.Fatal(err)
	}
	if fs := detect(t, ctx, d); len(fs) != 0 {
		t.Fatalf("before the resharding: %s", describe(fs))
	}
	mu.Lock()
	armed = true
	mu.Unlock()
	fs, err := d.Detect(ctx)
	if owner, _ := cl.SlotOwner(slot); owner != to {
		t.Fatalf("the heartbeat's slot was not moved during the scan (Detect: %v)", err)
	}
	if err != nil {
		return // a read that fails reports nothing: allowed
	}
	for _, f := range fs {
		if f.Kind == detectors.KindHolderDead {
			t.Fatalf("a live holder's lock reported holder_dead after its heartbeat moved during the scan:%s", describe(fs))
		}
	}
}

// testDetectDuringASlotMigration: while a slot holding a live lock,
// an immortal lock and a heartbeat is half-migrated (each key on one node
// or the other), Detect reports the immortal lock and nothing for the live
// holder's.
func testDetectDuringASlotMigration(t *testing.T, cl *testenv.RedisCluster) {
	ctx := timeout(t, time.Minute)
	c := cl.Client(t)
	// One hash tag: the heartbeat's instance name carries it too.
	const live, immortal = "lock:dead:{m}1", "lock:immortal:{m}2"
	if err := c.Set(ctx, live, deadValue("pod-{m}", 42), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, immortal, deadValue("pod-{m}", 42), 0).Err(); err != nil {
		t.Fatal(err)
	}
	putBeat(t, ctx, c, otherBeat("pod-{m}", 42))
	d, err := detectors.NewLocks(redisStore(t, c), detectors.WithPolicy(loadPolicy(t)))
	if err != nil {
		t.Fatal(err)
	}
	want := detectors.KindImmortal + " " + immortal
	check := func(when string) {
		t.Helper()
		fs, err := d.Detect(ctx)
		if err != nil {
			t.Fatalf("%s: Detect: %v", when, err)
		}
		if len(fs) != 1 || fs[0].Kind+" "+fs[0].Key != want {
			t.Fatalf("%s: findings%s\nwant only %s", when, describe(fs), want)
		}
	}
	check("before the migration")
	m, err := cl.BeginKeyMigration(live)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Finish(10) }()
	check("slot open, nothing moved")
	for _, k := range []string{live, fleet.RedisKey("pod-{m}"), immortal} {
		if err := m.Move(k); err != nil {
			t.Fatal(err)
		}
		check("after moving " + k)
	}
	if err := m.Finish(10); err != nil {
		t.Fatal(err)
	}
	check("after the migration")
}
