package redislock_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
)

// TestHelperPausedWaiter is the child process of TestPausedWaiter: it waits
// for the lock, says when it holds it and releases it.
func TestHelperPausedWaiter(t *testing.T) {
	addr := os.Getenv("REDISLOCK_HELPER_ADDR")
	if addr == "" {
		t.Skip("helper process only")
	}
	l := newLocker(t, newClient(t, addr))
	ctx := timeout(t, 60*time.Second)
	lease, err := l.Acquire(ctx, "lock:paused", instrument.WithTTL(5*time.Second))
	if err != nil {
		fmt.Println("ERR", err)
		return
	}
	fmt.Println("HELD", lease.Fence())
	time.Sleep(100 * time.Millisecond)
	if err := lease.Release(ctx); err != nil {
		fmt.Println("ERR", err)
	}
	fmt.Println("RELEASED")
}

// TestPausedWaiter: a waiting process is stopped (SIGSTOP) for longer than
// the waiter timeout while the lock changes hands, then resumed. The
// release skips it; after it resumes it queues again and gets the lock only
// after the holder released, with a larger fence.
func TestPausedWaiter(t *testing.T) {
	t.Parallel()
	r, c := setup(t)
	ctx := timeout(t, 60*time.Second)
	const key = "lock:paused"
	h := newLocker(t, c)
	held, err := h.Acquire(ctx, key, instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperPausedWaiter$", "-test.v")
	cmd.Env = append(os.Environ(), "REDISLOCK_HELPER_ADDR="+r.Addr())
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := make(chan string, 16)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	waitQueued(t, ctx, c, key, 1)
	entry := c.LIndex(ctx, queueKey(key), 0).Val()
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Until its deadline in the queue has passed.
	waitFor(t, ctx, "the paused waiter's deadline", func() bool {
		dl := c.ZScore(ctx, waitersKey(key), entry).Val()
		now := c.Time(ctx).Val().UnixMilli()
		return float64(now) > dl+50
	})
	x := newLocker(t, newClient(t, r.Addr()))
	var attempts atomicInt
	got := acquireInBackground(ctx, x, key, &attempts.v)
	waitQueued(t, ctx, c, key, 2)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	xl := <-got
	if xl == nil {
		t.Fatal("X never got the lock")
	}
	if xl.Fence() <= held.Fence() {
		t.Fatalf("X's fence %d not above %d", xl.Fence(), held.Fence())
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, ctx, c, key, 1) // the resumed waiter queued again behind X
	select {
	case l := <-lines:
		if strings.HasPrefix(l, "HELD") {
			t.Fatalf("the resumed waiter holds while X holds: %s", l)
		}
	default:
	}
	if err := xl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for l := range lines {
		if f, ok := strings.CutPrefix(l, "HELD "); ok {
			n, _ := strconv.ParseUint(f, 10, 64)
			if n <= xl.Fence() {
				t.Fatalf("the resumed waiter's fence %d not above X's %d", n, xl.Fence())
			}
			return
		}
		if strings.HasPrefix(l, "ERR") {
			t.Fatalf("resumed waiter: %s", l)
		}
	}
	t.Fatal("the resumed waiter never got the lock")
}

type atomicInt struct{ v atomic.Int32 }
