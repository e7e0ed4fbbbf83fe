package fleet_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/redislock"
)

const helperEnv = "LOCKGOV_FLEET_HELPER_REDIS"

// A governed process that is killed leaves its heartbeat to expire: the
// key is gone once its TTL of three intervals has run out, and the lock it
// held is still there (its own TTL is longer), which is what the agent's
// holder_dead finding is made of.
func TestHeartbeat_GoneAfterTheProcessIsKilled(t *testing.T) {
	c := redisClient(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+c.Options().Addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				ready <- s
			}
		}
		close(ready)
	}()
	var inst string
	select {
	case inst = <-ready:
	case <-time.After(60 * time.Second):
		t.Fatal("the helper process did not get ready")
	}
	if inst == "" {
		t.Fatal("the helper process exited before getting ready")
	}
	eventually(t, "the helper's heartbeat with its lock", func() bool {
		hb := redisBeat(t, c, inst)
		return hb != nil && len(hb.Held) == 1 && hb.PID == cmd.Process.Pid
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	eventually(t, "the killed process's heartbeat to expire", func() bool { return redisBeat(t, c, inst) == nil })
	k, _ := redislock.KeysFor("lock:crash:1")
	if n, err := c.Exists(ctxFor(t, 5*time.Second), k.Lock).Result(); err != nil || n != 1 {
		t.Errorf("the dead holder's lock: exists=%d (%v), want it still there until its own TTL", n, err)
	}
}

// TestHelperProcess is the governed process TestHeartbeat_GoneAfterTheProcessIsKilled
// kills; it does nothing in a normal run.
func TestHelperProcess(t *testing.T) {
	addr := os.Getenv(helperEnv)
	if addr == "" {
		t.Skip("helper process for TestHeartbeat_GoneAfterTheProcessIsKilled")
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	l, err := redislock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	inst := fmt.Sprintf("helper-%d", os.Getpid())
	g, err := instrument.NewGoverned(l, instrument.WithLogger(quiet),
		instrument.WithHeartbeat(fleet.WithInstance(inst), fleet.WithInterval(interval)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := g.Acquire(ctx, "lock:crash:1", instrument.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready", inst)
	<-ctx.Done() // killed before this
}
