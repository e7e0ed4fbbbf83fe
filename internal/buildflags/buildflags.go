// Package buildflags gives tests that run the go command (go build, go
// list -export) the build flags of their own binary, so that what they
// compile is what go vet and go test compiled already.
//
// scripts/test runs go vet and go test with -race, and on a clean machine
// compiling the dependencies is most of its run. A `go build` or a
// packages.Load without -race compiles every dependency a second time, in
// the other mode: for cmd/lockgov, etcd's server, gRPC and OpenTelemetry
// included.
package buildflags

import (
	"os"
	"runtime/debug"
	"strings"
)

// Race reports whether the running binary was built with -race.
func Race() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// Args are the go command's build flags matching the running binary's:
// ["-race"] or none.
func Args() []string {
	if Race() {
		return []string{"-race"}
	}
	return nil
}

// Env is env (os.Environ() when nil) with GOFLAGS carrying -race when the
// running binary was built with it: for a go command the test runs that
// compiles without saying so (go list -export under packages.Load, go vet
// -vettool).
func Env(env []string) []string {
	if env == nil {
		env = os.Environ()
	}
	if !Race() {
		return env
	}
	flags := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GOFLAGS="); ok {
			flags = v // the last one counts, as in exec.Cmd
		}
	}
	return append(env, "GOFLAGS="+strings.TrimSpace(flags+" -race"))
}
