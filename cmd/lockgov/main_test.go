package main

import (
	"os"
	"testing"

	"github.com/lockgov/lockgov/internal/leakcheck"
)

func TestMain(m *testing.M) {
	// The runbook test runs its shell commands' `lockgov` as this binary.
	if os.Getenv(runAsCLIEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	leakcheck.VerifyTestMain(m)
}
