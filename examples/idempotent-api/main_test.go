package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The crash tests run the server as a child process: this test binary,
// re-executed with childEnv set, serves the API instead of running tests.
const (
	childEnv  = "IDEMAPI_CHILD"
	redisEnv  = "IDEMAPI_REDIS"
	pgEnv     = "IDEMAPI_PG"
	hangAtEnv = "IDEMAPI_HANG_AT"
	// childLease is the key lease in the child: a killed child blocks its
	// key this long before a retry may run the handler again.
	childLease = time.Second
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		serveChild()
		return
	}
	goleak.VerifyTestMain(m)
}

// serveChild serves the API and prints "LISTEN <addr>". At the point named by
// IDEMAPI_HANG_AT it prints "AT <point>" and blocks, so the parent can SIGKILL
// it there, mid-request.
func serveChild() {
	hangAt := os.Getenv(hangAtEnv)
	hook := func(point string) {
		if point == hangAt {
			fmt.Printf("AT %s\n", point)
			select {} // until SIGKILL
		}
	}
	ready := func(addr string) { fmt.Printf("LISTEN %s\n", addr) }
	err := run(context.Background(), "127.0.0.1:0", os.Getenv(redisEnv), os.Getenv(pgEnv), childLease, ready, hook)
	fmt.Fprintln(os.Stderr, "child:", err)
	os.Exit(1)
}

// child is a server process started by startChild.
type child struct {
	cmd   *exec.Cmd
	addr  string
	lines chan string // the child's stdout after LISTEN, closed at its exit
}

// startChild runs the server in a child process against the given servers,
// hanging at hangAt ("" for never), and waits until it listens.
func startChild(t *testing.T, redisAddr, pgDSN, hangAt string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", redisEnv+"="+redisAddr, pgEnv+"="+pgDSN, hangAtEnv+"="+hangAt)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(c.kill)
	line := c.next(t)
	addr, ok := strings.CutPrefix(line, "LISTEN ")
	if !ok {
		t.Fatalf("child said %q, want LISTEN <addr>", line)
	}
	c.addr = addr
	return c
}

// next returns the child's next line of output; it fails the test if the
// child exits or says nothing for 60s (a deadline for a broken child, not a
// timing assumption).
func (c *child) next(t *testing.T) string {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			t.Fatal("child exited")
		}
		return line
	case <-time.After(60 * time.Second):
		t.Fatal("child silent for 60s")
		return ""
	}
}

// kill sends SIGKILL and reaps the child; the reader goroutine ends with it.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	for range c.lines {
	}
	_ = c.cmd.Wait()
}
