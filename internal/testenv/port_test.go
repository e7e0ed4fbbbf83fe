package testenv

import (
	"errors"
	"fmt"
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
	if err := refusesBind(r.Port()); err != nil {
		t.Fatalf("a killed server: %v: nothing holds it for Restart", err)
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

// TestEtcd_RestartHoldsThePortsBetweenTries (h108): a stopped member holds
// its ports until it runs again. A Restart whose start fails on a port in
// use (here the client port, which the test listens on) tries again after
// a pause; during that pause the member is still down, and its other port
// (the peer port, which nothing connected to, so no TIME_WAIT lets a
// plain bind through) must still refuse anyone's bind, as it did after
// Stop. Released there, another test's server or the kernel could take it
// and the next try fail too.
func TestEtcd_RestartHoldsThePortsBetweenTries(t *testing.T) {
	e := NewEtcd(t)
	cport, pport := urlPort(e.clientURL), urlPort(e.peerURL)
	e.Stop()
	// Hand the client port to a listener of the test's, so the first try
	// fails with "address already in use".
	e.mu.Lock()
	e.hold.release()
	e.hold = nil
	e.mu.Unlock()
	fd, err := bindOnly(pport, false)
	if err != nil {
		t.Fatalf("peer port %d with nothing holding it: %v; the check below could not tell a hold", pport, err)
	}
	_ = syscall.Close(fd)
	e.mu.Lock()
	e.hold = holdPorts(pport)
	e.mu.Unlock()
	taken, err := net.Listen("tcp", e.clientURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()

	pauses := 0
	e.pause = func(time.Duration) {
		pauses++
		if err := refusesBind(pport); err != nil {
			t.Errorf("between Restart's tries, the peer port: %v: its hold was let go", err)
		}
		_ = taken.Close() // the next try may have the client port
	}
	if err := e.Restart(); err != nil {
		t.Fatalf("Restart once the client port is free again: %v", err)
	}
	if pauses == 0 {
		t.Fatalf("Restart's first try succeeded on client port %d, which the test listened on", cport)
	}
}

// TestRedis_AFailedRestartHoldsThePorts (h108): a Restart whose server does
// not start (here its cluster bus port is in use: the test listens on it)
// leaves the server down, and its client port, which no client connected
// to, must refuse anyone's bind as after Kill, so that the next Restart
// finds it free.
func TestRedis_AFailedRestartHoldsThePorts(t *testing.T) {
	bus, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r, err := StartRedis(WithRedisArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", strconv.Itoa(bus)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	// Hand the bus port to a listener of the test's.
	r.mu.Lock()
	r.hold.release()
	r.hold = holdPorts(r.port)
	r.mu.Unlock()
	taken, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(bus)))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if err := r.Restart(); err == nil {
		t.Fatalf("Restart succeeded with its cluster bus port %d in use", bus)
	}
	if err := refusesBind(r.Port()); err != nil {
		t.Fatalf("after a failed Restart: %v: its hold was let go", err)
	}
	_ = taken.Close()
	if err := r.Restart(); err != nil {
		t.Fatalf("Restart once the bus port is free again: %v", err)
	}
	if err := ping(r.Addr(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// refusesBind returns nil when a plain bind of port fails with "address
// already in use" (something holds it), and otherwise an error that says
// what the bind did.
func refusesBind(port int) error {
	fd, err := bindOnly(port, false)
	if err == nil {
		_ = syscall.Close(fd)
		return fmt.Errorf("port %d could be bound by someone else", port)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("bind port %d: %v, want address already in use", port, err)
	}
	return nil
}
