package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
)

// startRedis runs a private redis-server on a free loopback port (this
// module keeps lockgov's test harness, and its etcd server, out of its
// go.mod, so it starts the process itself).
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not installed (./scripts/test installs it): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not start", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGovernedRedsync_ExcludesAndReleases: the governed redsync Mutex keeps
// mutual exclusion, reports a taken lock as ErrNotAcquired, and releases.
func TestGovernedRedsync_ExcludesAndReleases(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: startRedis(t)})
	defer rdb.Close()
	locker := governedRedsync(redsync.New(goredis.NewPool(rdb)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	lease, err := locker.Acquire(ctx, "lock:order:1001", instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locker.Acquire(ctx, "lock:order:1001", instrument.FailFast()); !errors.Is(err, instrument.ErrNotAcquired) {
		t.Fatalf("second acquire while held: %v, want ErrNotAcquired", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, "lock:order:1001").Val() != 0 {
		t.Fatal("redsync key left behind after Release")
	}
	again, err := locker.Acquire(ctx, "lock:order:1001", instrument.FailFast())
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The policy's timeout rule applies to wrapped code too.
	if _, err := locker.Acquire(context.Background(), "lock:order:1001"); !errors.Is(err, instrument.ErrPolicy) {
		t.Fatalf("acquire without deadline: %v, want ErrPolicy", err)
	}
}
