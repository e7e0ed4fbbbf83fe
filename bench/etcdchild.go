package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockgov/lockgov/internal/testenv"
)

// serveEtcdEnv, set to 1, makes this binary (the runner, or its test binary) serve an embedded
// etcd instead of running: see etcdChild.
const serveEtcdEnv = "LOCKGOV_BENCH_SERVE_ETCD"

// In init, not main: the end-to-end test starts the runner inside the test binary, and its
// etcd child is that binary again, which must serve before the testing package parses flags.
func init() {
	if os.Getenv(serveEtcdEnv) == "1" {
		os.Exit(serveEtcd(os.Stdin, os.Stdout))
	}
}

// serveEtcd starts an embedded etcd (internal/testenv, free loopback ports), writes its client
// endpoints to out as one comma-separated line, and serves until in reaches EOF: the runner
// closes it, or dies, and the pipe closes with it.
func serveEtcd(in io.Reader, out io.Writer) int {
	// An interrupt at the terminal reaches the whole process group: the runner shuts down on
	// it and closes this child's stdin, and etcd then closes and removes its directory. Dying
	// on the signal itself would leave the directory behind.
	signal.Ignore(os.Interrupt)
	et, err := testenv.StartEtcd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench etcd child:", err)
		return 1
	}
	defer et.Close()
	if _, err := fmt.Fprintln(out, strings.Join(et.Endpoints(), ",")); err != nil {
		return 1
	}
	_, _ = io.Copy(io.Discard, in)
	return 0
}

// etcdChild is the run's etcd: embedded (go.etcd.io/etcd/server/v3/embed, through testenv),
// in a process of its own, as redis-server is. Run in the runner's own process it shared the
// runner's heap, garbage collector and scheduler with every row, Redis rows included, and the
// etcd rows' client CPU included the server's; in a child its CPU is read as redis-server's is,
// and the rows of both stores are measured the same way.
type etcdChild struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	endpoints []string
	stderr    *capped
	done      chan struct{} // closed when the child has exited
	waitErr   error         // set before done is closed
}

// etcdStartTimeout bounds the child's start: testenv's own retries, on a loaded machine.
const etcdStartTimeout = 2 * time.Minute

// startEtcdChild starts this binary again as an etcd server and waits for its endpoints.
func startEtcdChild() (*etcdChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("etcd child: %w", err)
	}
	c := &etcdChild{cmd: exec.Command(exe), stderr: &capped{max: 64 << 10}, done: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), serveEtcdEnv+"=1")
	c.cmd.Stderr = c.stderr
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("etcd child: %w", err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("etcd child: %w", err)
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("etcd child: %w", err)
	}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n') // "" when the child died first
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stdout) // stdout must be drained before Wait
		c.waitErr = c.cmd.Wait()
		close(c.done)
	}()
	t := time.NewTimer(etcdStartTimeout)
	defer t.Stop()
	select {
	case line := <-lines:
		if line == "" {
			<-c.done
			return nil, fmt.Errorf("etcd child exited before serving (%v): %s", c.waitErr, c.stderr)
		}
		c.endpoints = strings.Split(line, ",")
		return c, nil
	case <-t.C:
		c.Close()
		return nil, fmt.Errorf("etcd child: no endpoints after %v: %s", etcdStartTimeout, c.stderr)
	}
}

// Close stops the child: closing its stdin ends its wait, and it closes etcd on its way out.
// One that has not exited after 30 s is killed.
func (c *etcdChild) Close() {
	_ = c.stdin.Close()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on Linux whatever the
// kernel's own tick).
const userHZ = 100

// cpu is the child's user+system CPU time so far, all its threads, from /proc/<pid>/stat; 10 ms
// resolution, against the tens of seconds of server CPU an etcd row takes over its rounds.
func (c *etcdChild) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("etcd child CPU: %w", err)
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a /proc/<pid>/stat line. The
// command name, field 2, is in parentheses and may hold spaces and parentheses itself: the
// fields are counted from after its last ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat %q: no command name", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: CPU field %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// capped keeps the first max bytes written to it (the child's stderr, for error messages).
type capped struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.b.Len() == 0 {
		return "(no output)"
	}
	return strings.TrimSpace(c.b.String())
}
