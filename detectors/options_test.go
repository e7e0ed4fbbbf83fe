package detectors_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/detectors"
)

// TestLocks_FindingsAreCappedPerKind: 30 immortal locks with a cap of 5
// give the first 5 by key and one summary finding counting the other 25,
// so a store full of leaked keys cannot make the findings grow without
// bound.
func TestLocks_FindingsAreCappedPerKind(t *testing.T) {
	ctx := timeout(t, time.Minute)
	c := newRedis(t)
	for i := range 30 {
		if err := c.Set(ctx, "lock:leak:"+strconv.Itoa(100+i), "tok", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	d, err := detectors.NewLocks(redisStore(t, c, detectors.WithScanCount(7)), detectors.WithMaxFindings(5))
	if err != nil {
		t.Fatal(err)
	}
	fs := detect(t, ctx, d)
	if len(fs) != 6 || fs[0].Key != "" || !strings.Contains(fs[0].Detail, "25 more") {
		t.Fatalf("findings:%s", describe(fs))
	}
	for i, f := range fs[1:] {
		if want := "lock:leak:" + strconv.Itoa(100+i); f.Key != want {
			t.Fatalf("finding %d key %s, want %s", i, f.Key, want)
		}
	}
}

// TestOptions_AnOptionThatDoesNotApplyIsAnError.
func TestOptions_AnOptionThatDoesNotApplyIsAnError(t *testing.T) {
	c := newRedis(t)
	s := redisStore(t, c)
	if _, err := detectors.NewClock(s, detectors.WithPatterns("x:*")); !errors.Is(err, detectors.ErrInvalid) {
		t.Fatalf("NewClock(WithPatterns): %v", err)
	}
	if _, err := detectors.NewWorkerIDs(s, detectors.WithServiceRange("a", 5, 1)); !errors.Is(err, detectors.ErrInvalid) {
		t.Fatalf("inverted range: %v", err)
	}
	if _, err := detectors.NewLocks(nil); !errors.Is(err, detectors.ErrInvalid) {
		t.Fatalf("nil store: %v", err)
	}
	if _, err := detectors.NewRedisStore(c, detectors.WithScanCount(0)); !errors.Is(err, detectors.ErrInvalid) {
		t.Fatalf("scan count 0: %v", err)
	}
}
