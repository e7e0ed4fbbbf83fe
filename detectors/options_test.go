package detectors_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/detectors"
)

// TestLocks_FindingsAreCappedPerKind: 30 immortal locks with a cap of 5
// give the first 5 by key and one summary finding counting the other 25,
// so a store full of leaked keys cannot make the findings grow without
// bound.
func TestLocks_FindingsAreCappedPerKind(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// TestLocks_AKeySCANReturnsTwiceIsOneFinding: SCAN may return a key more
// than once (Redis guarantees only that a key present throughout is
// returned at least once: a rehash during the scan repeats some). Every
// SCAN reply here also repeats the previous reply's keys, as a rehash
// would: each lock is still one finding, under the cap and past it.
func TestLocks_AKeySCANReturnsTwiceIsOneFinding(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, time.Minute)
	c := newRedis(t)
	for i := range 60 {
		if err := c.Set(ctx, "lock:leak:"+strconv.Itoa(100+i), "tok", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	repeat := &scanRepeats{}
	c.AddHook(repeat)
	for _, max := range []int{1000, 5} {
		d, err := detectors.NewLocks(redisStore(t, c, detectors.WithScanCount(7)), detectors.WithMaxFindings(max))
		if err != nil {
			t.Fatal(err)
		}
		repeat.repeated.Store(0)
		fs := detect(t, ctx, d)
		if repeat.repeated.Load() == 0 {
			t.Fatal("no SCAN reply repeated a key: the test tests nothing")
		}
		var keys []string
		for _, f := range fs {
			if f.Key != "" {
				keys = append(keys, f.Key)
			}
		}
		want := 60
		if max == 5 {
			want = 5
			if len(fs) != 6 || fs[0].Key != "" || !strings.Contains(fs[0].Detail, "more immortal findings") {
				t.Errorf("max %d: want 5 findings and a summary:%s", max, describe(fs))
			}
		}
		if len(keys) != want {
			t.Errorf("max %d: %d findings with a key, want %d:%s", max, len(keys), want, describe(fs[:min(len(fs), 12)]))
		}
		for i, k := range keys {
			if w := "lock:leak:" + strconv.Itoa(100+i); k != w {
				t.Fatalf("max %d: finding %d is %s, want %s (each key once, in order)", max, i, k, w)
			}
		}
	}
}

// scanRepeats is a go-redis hook (client.AddHook) that adds the keys of
// the previous SCAN reply of the same scan to each SCAN reply: what a
// rehash between two SCAN calls can make Redis return.
type scanRepeats struct {
	mu       sync.Mutex
	last     []string
	repeated atomic.Int64 // keys returned again
}

func (h *scanRepeats) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scanRepeats) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.repeat(cmd)
		return err
	}
}

func (h *scanRepeats) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.repeat(cmd)
		}
		return err
	}
}

func (h *scanRepeats) repeat(cmd redis.Cmder) {
	sc, ok := cmd.(*redis.ScanCmd)
	if !ok || sc.Err() != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if args := sc.Args(); len(args) > 1 && fmt.Sprint(args[1]) == "0" {
		h.last = nil // a new scan
	}
	keys, cursor := sc.Val()
	prev := h.last
	h.last = slices.Clone(keys)
	h.repeated.Add(int64(len(prev)))
	sc.SetVal(append(prev, keys...), cursor)
}
