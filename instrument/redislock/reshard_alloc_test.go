package redislock

import (
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Every Release asks resharding about its error, nil nearly always: that
// must cost the uncontended pair no allocation (redis.HasErrorPrefix, called
// once per prefix, allocated its errors.As target four times per Release).
func TestResharding_NilErrorAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = resharding(nil) }); n != 0 {
		t.Fatalf("resharding(nil) allocates %v times per call, want 0", n)
	}
}

func TestResharding_ReadsClusterAnswersOnly(t *testing.T) {
	t.Parallel()
	reply := func(s string) error { return fmt.Errorf("redislock: release: %w", redisError(s)) }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("TRYAGAIN not a reply"), false},
		{reply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{reply("ASK 3999 127.0.0.1:7001"), true},
		{reply("MOVED 3999 127.0.0.1:7001"), true},
		{reply("ERR Script attempted to access a non local key in a cluster node script"), true},
		{reply("ERR Error running script: something else"), false},
		{reply("NOSCRIPT No matching script"), false},
		{redis.Nil, false},
	} {
		if got := resharding(tc.err); got != tc.want {
			t.Errorf("resharding(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// redisError is an error reply as go-redis returns one (redis.Error).
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}
