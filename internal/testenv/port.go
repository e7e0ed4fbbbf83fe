package testenv

import (
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
)

// handedOut is every port FreePort has returned in this process. Tests run
// in parallel (t.Parallel), and a server a test stopped keeps its port
// number for Restart while nothing listens on it: a FreePort for another
// test's new server then found that port free and handed it out, and the
// restart failed with "address already in use" (etcdlock, once in five
// runs with -parallel 4). No port is returned twice in one process.
var handedOut struct {
	mu    sync.Mutex
	ports map[int]bool
}

// freePortTries bounds FreePort's search: each try holds its port until the
// search ends, so the kernel hands out a different one each time.
const freePortTries = 256

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that it has not returned before in this process.
//
// The port is not held: another process can take it before the caller binds
// it, so callers that start servers should retry with a new port when the
// bind fails.
func FreePort() (int, error) {
	var skipped []net.Listener
	defer func() {
		for _, ln := range skipped {
			_ = ln.Close()
		}
	}()
	for range freePortTries {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("testenv: find free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		handedOut.mu.Lock()
		seen := handedOut.ports[port]
		if !seen {
			if handedOut.ports == nil {
				handedOut.ports = make(map[int]bool)
			}
			handedOut.ports[port] = true
		}
		handedOut.mu.Unlock()
		if seen {
			skipped = append(skipped, ln)
			continue
		}
		if err := ln.Close(); err != nil {
			return 0, fmt.Errorf("testenv: find free port: %w", err)
		}
		return port, nil
	}
	return 0, fmt.Errorf("testenv: find free port: %d ports in a row were handed out before in this process", freePortTries)
}

// portHold keeps a stopped server's port from being taken until the server
// starts again: a socket bound to 127.0.0.1:port that does not listen. A
// connection to the port is still refused, as to a stopped server, but the
// kernel picks the port neither for another socket's bind to port 0 (a
// FreePort in another test process) nor for an outgoing connection's local
// port, either of which made the restart fail with "address already in
// use". Bound without SO_REUSEADDR it also refuses anyone's explicit bind
// to the port; while the stopped server's connections sit in TIME_WAIT only
// a bind with SO_REUSEADDR succeeds (as the server's own does), which
// still keeps the kernel's choices off the port (checked on Linux 6: no
// port-0 bind among 19,990 picked it). Best effort: a port someone else
// took already is not held.
type portHold struct{ fds []int }

func holdPorts(ports ...int) *portHold {
	h := &portHold{}
	for _, port := range ports {
		fd, err := bindOnly(port, false)
		if err != nil {
			fd, err = bindOnly(port, true)
		}
		if err == nil {
			h.fds = append(h.fds, fd)
		}
	}
	return h
}

func bindOnly(port int, reuseAddr bool) (int, error) {
	// Created and marked close-on-exec under ForkLock, as the net package
	// does: a fork between the two (another test starting redis-server,
	// redis-cli or a child test binary) otherwise inherits the socket, and
	// the port stays bound in that child after release, so Restart fails
	// with "address already in use" (32 of 147 children inherited one in a
	// loop of binds beside a loop of execs).
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return -1, err
	}
	if reuseAddr {
		err = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	}
	if err == nil {
		err = syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	}
	if err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// release lets the ports go, just before the server binds them again. A
// nil hold releases nothing.
func (h *portHold) release() {
	if h == nil {
		return
	}
	for _, fd := range h.fds {
		_ = syscall.Close(fd)
	}
	h.fds = nil
}

// ClosedPort returns a loopback port that refuses connections until the
// test ends: bound, never listening. A test that wants a dial refused used
// FreePort, a port free a moment ago, which a server of a test running
// beside it (another package's, another process) could take meanwhile: a
// Proxy there in blackhole mode turned "connection refused" into an i/o
// timeout (cmd/lockgov, once). Bound without SO_REUSEADDR, the port is
// taken neither by the kernel's choices nor by anyone's bind.
func ClosedPort(t testing.TB) int {
	t.Helper()
	for range freePortTries {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		fd, err := bindOnly(port, false)
		if err != nil {
			continue // taken since: try another
		}
		t.Cleanup(func() { _ = syscall.Close(fd) })
		return port
	}
	t.Fatalf("testenv: no port could be held closed in %d tries", freePortTries)
	return 0
}
