package testenv

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestRedisLifecycle: a private Redis answers PING, is unreachable after
// Kill, comes back on the same port after Restart, and stops answering while
// paused.
func TestRedisLifecycle(t *testing.T) {
	r := NewRedis(t)
	if r.Port() == 6379 {
		t.Fatalf("testenv must never use 6379")
	}
	if want := "127.0.0.1:" + strconv.Itoa(r.Port()); r.Addr() != want {
		t.Fatalf("Addr() = %q, want %q", r.Addr(), want)
	}
	if err := ping(r.Addr(), time.Second); err != nil {
		t.Fatalf("PING: %v", err)
	}

	if err := r.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if conn, err := net.DialTimeout("tcp", r.Addr(), time.Second); err == nil {
		conn.Close()
		t.Fatalf("dial after Kill succeeded")
	}

	port := r.Port()
	if err := r.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if r.Port() != port {
		t.Fatalf("port changed across Restart: %d -> %d", port, r.Port())
	}
	if err := ping(r.Addr(), time.Second); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}

	if err := r.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := ping(r.Addr(), 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING while paused: got %v, want timeout", err)
	}
	if err := r.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if err := ping(r.Addr(), 2*time.Second); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

// TestRedisCloseWhilePaused: Close reaps a stopped server and is idempotent.
func TestRedisCloseWhilePaused(t *testing.T) {
	r, err := StartRedis(WithRedisArgs("--maxmemory", "10mb"))
	if err != nil {
		t.Fatalf("StartRedis: %v", err)
	}
	if err := r.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := r.Restart(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Restart after Close: got %v, want ErrClosed", err)
	}
	if conn, err := net.DialTimeout("tcp", r.Addr(), time.Second); err == nil {
		conn.Close()
		t.Fatalf("dial after Close succeeded")
	}
}

// TestRedisBadArgs: a server that refuses to start is reported with its log.
func TestRedisBadArgs(t *testing.T) {
	r, err := StartRedis(WithRedisArgs("--no-such-option", "1"))
	if err == nil {
		r.Close()
		t.Fatalf("StartRedis with a bad option succeeded")
	}
	if !strings.Contains(err.Error(), "no-such-option") {
		t.Fatalf("error does not carry the server's complaint: %v", err)
	}
}

func TestFreePort(t *testing.T) {
	port, err := FreePort()
	if err != nil {
		t.Fatalf("FreePort: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("listen on free port %d: %v", port, err)
	}
	ln.Close()
}

// TestRedisPortInUse: a port taken by someone else is reported as such, so
// StartRedis retries with another one.
func TestRedisPortInUse(t *testing.T) {
	r := NewRedis(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.port = ln.Addr().(*net.TCPAddr).Port
	err = r.startLocked()
	r.mu.Unlock()
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("start on a taken port: got %v, want errPortInUse", err)
	}
}

// TestRedisPortTakenByAnotherRedis: a port another process's redis-server
// holds answers PING; starting on it must not adopt that server (two fuzz
// workers of one package once shared one, and a key's first request came
// back as a replay) but report the port in use.
func TestRedisPortTakenByAnotherRedis(t *testing.T) {
	other := NewRedis(t)
	r := NewRedis(t)
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.port = other.port
	err := r.startLocked()
	r.mu.Unlock()
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("start on another redis-server's port: got %v, want errPortInUse", err)
	}
}
