package testenv

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestFreePort_NeverReturnsAPortTwice: tests run side by side, and a
// stopped server keeps its port for Restart with nothing listening on it;
// FreePort must not hand that port to another test in the process. The
// kernel picks port-0 binds at random, so a thousand calls without the
// record repeat some port (about 18 expected over 28,232 ephemeral ports).
func TestFreePort_NeverReturnsAPortTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 1000 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("FreePort returned port %d twice", p)
		}
		seen[p] = true
	}
}

// TestRedis_KillHoldsThePortUntilRestartOrClose: while killed, the server's
// port refuses connections, as a crashed server's does, and is bound, so
// neither the kernel (another process's FreePort, an outgoing connection's
// local port) nor anyone's plain bind takes it before Restart; Restart
// binds it again, and Close lets it go.
func TestRedis_KillHoldsThePortUntilRestartOrClose(t *testing.T) {
	r, err := StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// No client connects: the server's port has no connection in TIME_WAIT
	// when it is killed, so a plain bind fails only if something holds it.
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", r.Addr(), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial a killed server: %v, want connection refused", err)
	}
	if fd, err := bindOnly(r.Port(), false); err == nil {
		_ = syscall.Close(fd)
		t.Fatalf("port %d of a killed server could be bound by someone else: nothing holds it for Restart", r.Port())
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("bind the killed server's port: %v, want address already in use", err)
	}
	if err := r.Restart(); err != nil {
		t.Fatalf("restart on the held port: %v", err)
	}
	if err := ping(r.Addr(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	port := r.Port()
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	fd, err := bindOnly(port, true)
	if err != nil {
		t.Fatalf("port %d after Close: %v, want it let go", port, err)
	}
	_ = syscall.Close(fd)
}

// TestClosedPort_RefusesAndCannotBeTaken: the port refuses a dial and
// nobody's bind takes it while the test runs.
func TestClosedPort_RefusesAndCannotBeTaken(t *testing.T) {
	port := ClosedPort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if _, err := net.DialTimeout("tcp", addr, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial the closed port: %v, want connection refused", err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		_ = ln.Close()
		t.Fatalf("another listener took closed port %d", port)
	}
}
