package testenv

import (
	"testing"
	"time"
)

// WaitFor polls cond every millisecond until it holds, failing the test
// after within: a liveness bound for an event the test cannot be told of.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(time.Millisecond)
	}
}
