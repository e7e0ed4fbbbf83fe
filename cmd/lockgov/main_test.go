package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/lockgov/lockgov/internal/buildflags"
	"github.com/lockgov/lockgov/internal/leakcheck"
)

// binDir holds the lockgov binary the tests that run it as an operator
// would share (buildLockgov), built once per test process.
var binDir string

func TestMain(m *testing.M) {
	// The runbook test runs its shell commands' `lockgov` as this binary.
	if os.Getenv(runAsCLIEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	dir, err := os.MkdirTemp("", "lockgov-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := leakcheck.Run(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var built struct {
	once sync.Once
	bin  string
	err  error
}

// buildLockgov returns the path of a lockgov binary built from this
// directory (`go build`, as an operator installs it). The first caller
// builds it; tests running side by side wait for that one build instead of
// each compiling the same packages.
func buildLockgov(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		bin := filepath.Join(binDir, "lockgov")
		// With this test binary's -race (internal/buildflags): the
		// packages are compiled already, by go vet and go test.
		args := append(append([]string{"build"}, buildflags.Args()...), "-o", bin, ".")
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		built.bin = bin
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}
