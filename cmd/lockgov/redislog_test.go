package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	"github.com/lockgov/lockgov/internal/testenv"
)

// TestCLI_GoRedisMessagesAreSlogLines runs the binary against a port
// nobody listens on: go-redis reports its failed dials itself, and each of
// its lines on stderr must be a slog record an operator's pipeline parses
// (component=go-redis, Warn), not go-redis's default "redis: <date> pool.go"
// line. The command's own error stays the last line.
func TestCLI_GoRedisMessagesAreSlogLines(t *testing.T) {
	t.Parallel()
	port := testenv.ClosedPort(t)
	bin := buildLockgov(t)
	cmd := exec.Command(bin, "locks", "ls", "--redis", fmt.Sprintf("redis://127.0.0.1:%d", port))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("locks ls against a closed port: %v, want exit 1; stderr:\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "lockgov locks ls: ") || !strings.Contains(last, "connection refused") {
		t.Errorf("last line %q, want the command's error naming the refusal", last)
	}
	goRedis := lines[:len(lines)-1]
	if len(goRedis) == 0 {
		t.Fatalf("no go-redis line before the error; stderr:\n%s", stderr.String())
	}
	for _, l := range goRedis {
		if !strings.HasPrefix(l, "time=") || !strings.Contains(l, " level=WARN ") ||
			!strings.HasSuffix(l, " component=go-redis") || !strings.Contains(l, `msg="connection pool: failed to dial`) {
			t.Errorf("go-redis line %q, want a slog text record: time=… level=WARN msg=\"connection pool: failed to dial …\" component=go-redis", l)
		}
	}
}

func TestRedisLogLevel(t *testing.T) {
	for msg, want := range map[string]slog.Level{
		"connection pool: failed to dial after 5 attempts: dial tcp: connection refused": slog.LevelWarn,
		`sentinel: GetMasterAddrByName name="m" failed: i/o timeout`:                     slog.LevelWarn,
		"sentinel: selected addr=127.0.0.1:26379 masterAddr=127.0.0.1:6380":              slog.LevelInfo,
		"sentinel: new master=\"m\" addr=\"127.0.0.1:6381\"":                             slog.LevelInfo,
		"Conn has unread data (not push notification), removing it":                      slog.LevelWarn,
		"addIdleConn panic: boom": slog.LevelWarn,
	} {
		if got := redisLogLevel(msg); got != want {
			t.Errorf("redisLogLevel(%q) = %v, want %v", msg, got, want)
		}
	}
}
