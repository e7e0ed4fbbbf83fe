package main

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/lockgov/lockgov/internal/testenv"
)

// The servers are started once, on first use, and shared by every test and
// benchmark of the package (each uses its own items and keys): starting
// PostgreSQL is the slowest part of the suite.
var shared struct {
	once  sync.Once
	redis *testenv.Redis
	pg    *testenv.Postgres
	err   error
}

func servers(tb testing.TB) (redisAddr, pgDSN string) {
	tb.Helper()
	shared.once.Do(func() {
		if shared.redis, shared.err = testenv.StartRedis(); shared.err != nil {
			return
		}
		shared.pg, shared.err = testenv.StartPostgres()
	})
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.redis.Addr(), shared.pg.DSN()
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.redis != nil {
		_ = shared.redis.Close()
	}
	if shared.pg != nil {
		_ = shared.pg.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
