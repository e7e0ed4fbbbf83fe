package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fence"
	"github.com/lockgov/lockgov/instrument/fence/redisfence"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// The paused client is this test binary run again as a child process: it
// takes the lock, says "held <fence>", and on "write" from its parent
// writes with that fence whether or not its lease is still alive (the
// worst case: the pause came between its check and its write), says what
// came of it, releases and exits.
const (
	childEnv      = "LOCKGOV_CHAOS_CHILD"
	childLockEnv  = "LOCKGOV_CHAOS_CHILD_LOCK"
	childResEnv   = "LOCKGOV_CHAOS_CHILD_RESOURCE"
	childTTL      = time.Second
	childMaxDelay = time.Minute
)

func runChild() int {
	ctx, cancel := context.WithTimeout(context.Background(), childMaxDelay)
	defer cancel()
	die := func(err error) int { fmt.Printf("err %v\n", err); return 1 }
	lc := redis.NewClient(&redis.Options{Addr: os.Getenv(childLockEnv), ContextTimeoutEnabled: true})
	defer lc.Close()
	rc := redis.NewClient(&redis.Options{Addr: os.Getenv(childResEnv), ContextTimeoutEnabled: true})
	defer rc.Close()
	l, err := redislock.New(lc)
	if err != nil {
		return die(err)
	}
	defer l.Close()
	fw, err := redisfence.New(rc)
	if err != nil {
		return die(err)
	}
	lease, err := l.Acquire(ctx, lockKey, instrument.WithTTL(childTTL))
	if err != nil {
		return die(err)
	}
	defer func() { _ = lease.Release(ctx) }()
	fmt.Printf("held %d\n", lease.Fence())
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "write" {
		return die(fmt.Errorf("want write, got %q %v", line, err))
	}
	err = fw.Set(ctx, resourceKey, EncodeValue(99, lease.Fence(), 1), lease.Fence(), 0)
	var se *fence.StaleFenceError
	switch {
	case err == nil:
		fmt.Println("ok")
	case errors.As(err, &se):
		fmt.Printf("stale %d\n", se.Stored)
	default:
		fmt.Printf("unknown %v\n", err)
	}
	return 0
}

// TestRedis_ClientProcessPausedPastTTL: a child process holding the lock is
// SIGSTOPped; its lease expires in Redis, the workload's clients take the
// lock over and write; the child is resumed and writes with its old fence:
// the write must be refused.
func TestRedis_ClientProcessPausedPastTTL(t *testing.T) {
	t.Parallel()
	s := newRedisSetup(t)
	cfg := s.config(t, time.Second)
	childID := len(cfg.Clients) + 1
	r := run(t, cfg, redisOpts, func(ctx context.Context, w *Workload, h *History) {
		for range rounds(1) {
			pausedChild(t, ctx, s, w, h, childID)
		}
	})
	if r.StaleRefused == 0 {
		t.Fatalf("the paused child's write was not refused: %v", r)
	}
}

func pausedChild(t *testing.T, ctx context.Context, s *redisSetup, w *Workload, h *History, id int) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childLockEnv+"="+s.lock.Addr(), childResEnv+"="+s.res.Addr())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	call := h.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = stdin.Close()
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
	}()
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	held := h.Now()
	f, ok := strings.CutPrefix(strings.TrimSpace(line), "held ")
	if err != nil || !ok {
		t.Fatalf("child: %q %v", line, err)
	}
	childFence, _ := strconv.ParseUint(f, 10, 64)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	h.Add(Op{Client: id, Kind: Acquire, Call: call, Return: held, Fence: childFence, Outcome: OK})
	// Wait, on the event, for a newer holder's write to be applied.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !newerWriteApplied(h, childFence) {
		select {
		case <-ctx.Done():
			t.Fatalf("no write above the paused child's fence %d: %v", childFence, ctx.Err())
		case <-tick.C:
		}
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	wcall := h.Now()
	if _, err := io.WriteString(stdin, "write\n"); err != nil {
		t.Fatal(err)
	}
	line, err = out.ReadString('\n')
	wret := h.Now()
	if err != nil {
		t.Fatalf("child's write: %q %v", line, err)
	}
	op := Op{Client: id, Kind: Write, Call: wcall, Return: wret, Fence: childFence, Counter: 1, Value: EncodeValue(99, childFence, 1)}
	switch fields := strings.Fields(line); fields[0] {
	case "ok":
		op.Outcome = OK
	case "stale":
		op.Outcome = Stale
		op.Stored, _ = strconv.ParseUint(fields[1], 10, 64)
	default:
		op.Outcome, op.Return, op.Err = Unknown, Open, line
	}
	h.Add(op)
	// The child's hold is promised only until it said "held".
	h.Add(Op{Client: id, Kind: Release, Call: held, Return: h.Now(), Fence: childFence, Outcome: OK})
}

func newerWriteApplied(h *History, f uint64) bool {
	for _, op := range h.Ops() {
		if op.Kind == Write && op.Outcome == OK && op.Fence > f {
			return true
		}
	}
	return false
}
