package detectors_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// deadlockChildEnv makes the test binary a governed process that holds one
// key and then waits for another: "ADDR INSTANCE HELD WANTED".
const deadlockChildEnv = "LOCKGOV_TEST_DEADLOCK_CHILD"

// TestMain_DeadlockChild is the child's body; it does nothing in the parent.
func TestMain_DeadlockChild(t *testing.T) {
	spec := os.Getenv(deadlockChildEnv)
	if spec == "" {
		t.Skip("runs only as the child process of TestDeadlock_TwoRealProcesses")
	}
	f := strings.Fields(spec)
	addr, instance, held, wanted := f[0], f[1], f[2], f[3]
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer c.Close()
	raw, err := redislock.New(c, redislock.WithService("inventory"), redislock.WithInstance(instance))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	g, err := instrument.NewGoverned(raw, instrument.WithHeartbeat(
		fleet.WithInstance(instance), fleet.WithService("inventory"), fleet.WithInterval(200*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	// Hold one key, then wait for the other until the parent kills us.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err = instrument.Do(ctx, g, held, func(ctx context.Context) error {
		fmt.Println("holding", held)
		// Ask for the other key only once the other process holds it, so
		// that neither gets both: a deadlock, not a race.
		for n, _ := c.Exists(ctx, wanted).Result(); n == 0; n, _ = c.Exists(ctx, wanted).Result() {
			time.Sleep(10 * time.Millisecond)
		}
		return instrument.Do(ctx, g, wanted, func(context.Context) error { return nil })
	})
	t.Log(err)
}

// TestDeadlock_TwoRealProcesses holds the deadlock line end to end:
// two processes (this test binary, run twice), each governed with
// heartbeats on, each holding one key and waiting for the other's, are
// reported as exactly one deadlock finding that names both instances and
// both keys, within two heartbeat intervals of both waits beginning.
func TestDeadlock_TwoRealProcesses(t *testing.T) {
	t.Parallel()
	if os.Getenv(deadlockChildEnv) != "" {
		t.Skip("child")
	}
	c := newRedis(t)
	addr := c.Options().Addr
	start := func(instance, held, wanted string) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMain_DeadlockChild$", "-test.v")
		cmd.Env = append(os.Environ(), deadlockChildEnv+"="+strings.Join([]string{addr, instance, held, wanted}, " "))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	ctx := timeout(t, 2*time.Minute)
	// Each child takes its key and asks for the other's only once the other
	// child holds it.
	start("proc-a", "lock:stock:apple", "lock:stock:pear")
	start("proc-b", "lock:stock:pear", "lock:stock:apple")
	waitKey(t, ctx, c, "lock:stock:apple")
	waitKey(t, ctx, c, "lock:stock:pear")

	d, err := detectors.NewDeadlock(redisStore(t, c))
	if err != nil {
		t.Fatal(err)
	}
	for {
		fs, err := d.Detect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var dl []detectors.Finding
		for _, f := range fs {
			if f.Kind == "deadlock" {
				dl = append(dl, f)
			}
		}
		if len(dl) == 1 {
			f := dl[0]
			for _, want := range []string{"proc-a", "proc-b", "lock:stock:apple", "lock:stock:pear"} {
				if !strings.Contains(f.Detail, want) {
					t.Errorf("deadlock finding %q does not name %s", f.Detail, want)
				}
			}
			if f.Severity != "critical" {
				t.Errorf("severity %q, want critical", f.Severity)
			}
			return
		}
		if len(dl) > 1 {
			t.Fatalf("%d deadlock findings for one cycle: %+v", len(dl), dl)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no deadlock finding; findings: %+v", fs)
		case <-time.After(100 * time.Millisecond): // polling the detector, with a deadline
		}
	}
}

// waitKey waits until key exists (a child holds it).
func waitKey(t *testing.T, ctx context.Context, c *redis.Client, key string) {
	t.Helper()
	for {
		if n, _ := c.Exists(ctx, key).Result(); n == 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s was never taken", key)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
