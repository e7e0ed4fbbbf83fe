package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ErrRedisNotInstalled is returned by StartRedis when no redis-server binary
// is found on PATH or at /usr/bin/redis-server.
var ErrRedisNotInstalled = errors.New("testenv: redis-server not installed (run ./scripts/test, or apt-get install -y redis-server)")

// ErrClosed is returned by methods called on a Redis after Close.
var ErrClosed = errors.New("testenv: closed")

const (
	redisReadyTimeout = 10 * time.Second
	redisStartTries   = 5
	redisFallbackPath = "/usr/bin/redis-server"
	logTailLines      = 20
)

// RedisOption configures StartRedis and NewRedis.
type RedisOption interface {
	apply(*redisConfig)
}

type redisConfig struct {
	args       []string
	configFile string
	sec        redisSecurity
}

type redisOptionFunc func(*redisConfig)

func (f redisOptionFunc) apply(c *redisConfig) { f(c) }

// WithRedisArgs appends extra command-line arguments to redis-server, for
// example WithRedisArgs("--maxmemory", "1mb"). They come after testenv's own
// arguments, so they win where they overlap; overriding --port, --bind or
// --dir breaks the Redis.
func WithRedisArgs(args ...string) RedisOption {
	return redisOptionFunc(func(c *redisConfig) {
		c.args = append(c.args, args...)
	})
}

// WithRedisConfigFile starts redis-server with a configuration file (its
// first argument), as Sentinel requires: Sentinel rewrites that file.
func WithRedisConfigFile(path string) RedisOption {
	return redisOptionFunc(func(c *redisConfig) { c.configFile = path })
}

// Redis is a private redis-server process in a temporary directory, listening
// on 127.0.0.1 on a port of its own. Its methods are safe for concurrent use.
type Redis struct {
	bin        string
	dir        string
	port       int
	args       []string
	configFile string
	sec        *redisSecurity // nil: plain TCP, no ACL

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil while not running
	exited chan struct{} // closed when cmd.Wait has returned
	paused bool
	closed bool
	hold   *portHold // the ports while killed, until Restart or Close
}

// NewRedis starts a Redis for the test and stops it, removing its directory,
// when the test ends. It fails the test if the server cannot be started.
func NewRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	r, err := StartRedis(opts...)
	if err != nil {
		if errors.Is(err, ErrRedisNotInstalled) {
			t.Fatalf("testenv: redis-server binary missing: run ./scripts/test (it installs redis-server) or apt-get install -y redis-server: %v", err)
		}
		t.Fatalf("testenv: start redis-server: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("testenv: close redis-server: %v", err)
		}
	})
	return r
}

// StartRedis starts a redis-server on a free loopback port and waits until it
// answers PING. It is for programs that are not tests; the caller must Close
// the Redis.
func StartRedis(opts ...RedisOption) (*Redis, error) {
	var cfg redisConfig
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	bin, err := findRedisServer()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "testenv-redis-")
	if err != nil {
		return nil, fmt.Errorf("testenv: redis temp dir: %w", err)
	}
	r := &Redis{bin: bin, dir: dir, args: cfg.args, configFile: cfg.configFile}
	if err := r.secure(cfg.sec); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}

	var lastErr error
	for try := 0; try < redisStartTries; try++ {
		port, err := FreePort()
		if err != nil {
			lastErr = err
			continue
		}
		r.port = port
		r.mu.Lock()
		err = r.startLocked()
		r.mu.Unlock()
		if err == nil {
			return r, nil
		}
		lastErr = err
		if !errors.Is(err, errPortInUse) {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

func findRedisServer() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if st, err := os.Stat(redisFallbackPath); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
		return redisFallbackPath, nil
	}
	return "", ErrRedisNotInstalled
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (r *Redis) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
}

// Port returns the server's TCP port. It does not change across Restart.
func (r *Redis) Port() int { return r.port }

// Kill sends SIGKILL to the server and waits for it to exit, like a crash.
// The port number is kept for Restart: while the server is down a socket
// bound to it without listening keeps other servers and outgoing
// connections off it (a client's dial is refused, as by a crashed server).
// Killing a Redis that is not running is a no-op.
func (r *Redis) Kill() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	running := r.cmd != nil
	if err := r.killLocked(); err != nil {
		return err
	}
	if running && r.hold == nil {
		r.hold = holdPorts(r.ports()...)
	}
	return nil
}

// ports are the server's TCP ports: its client port and, in a Redis
// Cluster, its cluster bus port.
func (r *Redis) ports() []int {
	ports := []int{r.port}
	for i, a := range r.args {
		if a == "--cluster-port" && i+1 < len(r.args) {
			if bus, err := strconv.Atoi(r.args[i+1]); err == nil && bus != 0 {
				ports = append(ports, bus)
			}
		}
	}
	return ports
}

// Restart starts the server again on the same port and waits until it answers
// PING. The data set is empty: nothing is persisted. A running server is
// killed first. A Restart that fails leaves the server down with its ports
// held, as Kill does, for the next Restart.
func (r *Redis) Restart() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if err := r.killLocked(); err != nil {
		return err
	}
	err := r.startLocked()
	if err != nil && r.hold == nil {
		// startLocked let the hold go for the server's bind, and reaped
		// the server that did not start.
		r.hold = holdPorts(r.ports()...)
	}
	return err
}

// Pause stops the server with SIGSTOP: connections stay open and accept
// bytes, but nothing is answered until Resume.
func (r *Redis) Pause() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.signalLocked(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("testenv: pause redis-server: %w", err)
	}
	r.paused = true
	return nil
}

// Resume continues a server stopped by Pause with SIGCONT.
func (r *Redis) Resume() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.signalLocked(syscall.SIGCONT); err != nil {
		return fmt.Errorf("testenv: resume redis-server: %w", err)
	}
	r.paused = false
	return nil
}

// Close kills the server if it is running, reaps it and removes its
// temporary directory. It is idempotent.
func (r *Redis) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.killLocked()
	r.hold.release()
	r.hold = nil
	if rmErr := os.RemoveAll(r.dir); rmErr != nil && err == nil {
		err = fmt.Errorf("testenv: remove redis dir: %w", rmErr)
	}
	return err
}

func (r *Redis) signalLocked(sig syscall.Signal) error {
	if r.closed {
		return ErrClosed
	}
	if r.cmd == nil {
		return errors.New("testenv: redis-server is not running")
	}
	// Signal the process group: the server leads its own group (Setpgid).
	return syscall.Kill(-r.cmd.Process.Pid, sig)
}

func (r *Redis) killLocked() error {
	if r.cmd == nil {
		return nil
	}
	pid := r.cmd.Process.Pid
	if r.paused {
		_ = syscall.Kill(-pid, syscall.SIGCONT)
		r.paused = false
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("testenv: kill redis-server: %w", err)
	}
	<-r.exited
	r.cmd, r.exited = nil, nil
	return nil
}

var errPortInUse = errors.New("port in use")

func (r *Redis) logPath() string { return r.dir + "/redis.log" }

// startLocked starts redis-server on r.port and waits for PING. On failure
// the process is reaped and r.cmd is nil.
func (r *Redis) startLocked() error {
	r.hold.release()
	r.hold = nil
	var args []string
	if r.configFile != "" {
		args = append(args, r.configFile)
	}
	args = append(args, r.portArgs()...)
	args = append(args,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", r.dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", r.logPath(),
	)
	args = append(args, r.securityArgs()...)
	args = append(args, r.args...)
	// Config errors go to stderr before the log file is open; send them to
	// the same file so the error's log tail shows them. An *os.File needs no
	// copying goroutines.
	out, err := os.OpenFile(r.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testenv: redis log: %w", err)
	}
	defer out.Close()
	cmd := exec.Command(r.bin, args...)
	cmd.Dir = r.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testenv: start %s: %w", r.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	r.cmd, r.exited = cmd, exited

	if err := waitReady(r.Addr(), exited, r.ping); err != nil {
		_ = r.killLocked()
		tail := r.logTail()
		if strings.Contains(tail, "in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return fmt.Errorf("testenv: redis-server on port %d: %w; log tail:\n%s", r.port, err, tail)
	}
	return nil
}

// waitReady dials addr until a raw PING gets +PONG, the process exits or
// redisReadyTimeout passes.
func waitReady(addr string, exited <-chan struct{}, ping func(addr string, timeout time.Duration) error) error {
	deadline := time.Now().Add(redisReadyTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("exited before answering PING")
		default:
		}
		if lastErr = ping(addr, 500*time.Millisecond); lastErr == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited before answering PING")
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("no PONG within %s: %w", redisReadyTimeout, lastErr)
}

// ping sends a raw RESP PING on a new connection and expects +PONG.
func ping(addr string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply to PING: %q", strings.TrimSpace(line))
	}
	return nil
}

func (r *Redis) logTail() string {
	b, err := os.ReadFile(r.logPath())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
