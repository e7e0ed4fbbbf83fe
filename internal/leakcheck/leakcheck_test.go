package leakcheck

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestFind_ReportsAGoroutineThatOutlivesTheGraceAndNotOneThatEndsWithinIt:
// the grace period waits for a goroutine that is ending, and still reports
// one that does not end.
func TestFind_ReportsAGoroutineThatOutlivesTheGraceAndNotOneThatEndsWithinIt(t *testing.T) {
	opts := []goleak.Option{goleak.IgnoreCurrent()}
	stuck := make(chan struct{})
	go func() { <-stuck }()
	err := Find(200*time.Millisecond, opts...)
	if err == nil || !strings.Contains(err.Error(), "leakcheck") {
		t.Fatalf("Find = %v, want the goroutine blocked in this test reported", err)
	}
	// One that ends a second from now (longer than goleak's own retries,
	// about 0.4 s) is waited for.
	go func() { time.Sleep(time.Second); close(stuck) }()
	if err := Find(Grace, opts...); err != nil {
		t.Fatalf("Find = %v, want nothing once the goroutines have ended", err)
	}
}

func TestMain(m *testing.M) { VerifyTestMain(m) }
