// Package leakcheck is the goroutine leak check every package of the module
// runs after its tests (goleak, with a grace period: VerifyTestMain). It
// depends on goleak alone, so that a package whose tests need no server
// does not link internal/testenv.
package leakcheck

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Grace is how long VerifyTestMain waits for goroutines to end after a
// package's tests have passed.
const Grace = 10 * time.Second

// VerifyTestMain is goleak.VerifyTestMain with a grace period that a
// client's own shutdown fits in: it runs the package's tests and, when they
// pass, fails the run if goroutines other than the test runner's are still
// alive Grace later. goleak's own retries give up after about 0.4 s,
// shorter than some shutdowns outside lockgov: go-redis's pool, once a
// server has refused its dials, probes it from a goroutine that sleeps a
// second between dials and sees the client closed only when it wakes
// (pool.go, tryDial), so a package whose last test kills a redis-server
// and closes its client failed about half its runs with that goroutine
// "leaked". A goroutine that does leak is still reported, 10 s later.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	os.Exit(Run(m, opts...))
}

// Run is VerifyTestMain without the exit: it returns the code to exit
// with, for a TestMain that removes what it made for the tests first.
func Run(m *testing.M, opts ...goleak.Option) int {
	code := m.Run()
	if code == 0 {
		if err := Find(Grace, opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	return code
}

// Find polls goleak.Find until it finds nothing or grace has passed, and
// returns its last error: goleak.VerifyNone for goroutines that take longer
// to end than goleak's own retries allow.
func Find(grace time.Duration, opts ...goleak.Option) error {
	deadline := time.Now().Add(grace)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
