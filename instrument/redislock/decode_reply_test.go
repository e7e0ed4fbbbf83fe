package redislock

import (
	"strings"
	"testing"
	"time"
)

// TestDecodeAcquire_ReplyShapes: an acquire script answers a bare fence
// when it takes the lock and {0, pttl, ...} when not; anything else, the
// {1, fence} of an acquire script before this one included, is an error
// naming the reply, never a lease with a made-up fence.
func TestDecodeAcquire_ReplyShapes(t *testing.T) {
	t.Parallel()
	a, rest, err := decodeAcquire(int64(1796634386772111))
	if err != nil || !a.acquired || a.fence != 1796634386772111 || rest != nil {
		t.Errorf("bare fence: %+v %v %v", a, rest, err)
	}
	a, rest, err = decodeAcquire([]any{int64(0), int64(2500), int64(42)})
	if err != nil || a.acquired || a.holderTTL != 2500*time.Millisecond || len(rest) != 3 || rest[2] != 42 {
		t.Errorf("not acquired: %+v %v %v", a, rest, err)
	}
	for _, bad := range []any{int64(0), int64(-1), []any{int64(1), int64(7)}, []any{int64(0)}, []any{int64(0), "x"}, "7", nil} {
		a, _, err := decodeAcquire(bad)
		if err == nil || a.acquired || !strings.Contains(err.Error(), "unexpected script reply") {
			t.Errorf("decodeAcquire(%#v) = %+v, %v; want an unexpected-reply error", bad, a, err)
		}
	}
}
