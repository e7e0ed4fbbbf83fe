package testenv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// evictFiller is the size of one filler value Evict writes; evictHeadroom is
// how far above the memory in use it sets maxmemory, so that setting it
// evicts nothing by itself and a few filler writes push Redis over.
const (
	evictFiller   = 1 << 10
	evictHeadroom = 128 << 10
	evictMaxSteps = 1 << 16 // 64 MiB of filler: far more than any test's keys
	evictTimeout  = 30 * time.Second
)

// Evict makes the single-node Redis behind c evict keys the way a production
// Redis with maxmemory and policy does (volatile-lru, volatile-ttl,
// allkeys-lru, allkeys-random, ...): it sets maxmemory a little above the
// memory in use and writes filler keys without a TTL until none of keys
// exists any more, then removes the filler, sets maxmemory back to 0 and the
// policy back to noeviction. Under a volatile-* policy the filler is never a
// candidate, so every key with a TTL may go with keys (as in production, where
// memory pressure does not pick one key); under allkeys-* the filler goes too.
//
// It fails the test when keys were not evicted, for example a key without a
// TTL under a volatile-* policy (Redis then refuses the filler with OOM), and
// when INFO stats' evicted_keys did not rise (the keys went some other way).
// It returns how many keys Redis evicted. Nothing here waits on a clock: each
// filler write runs Redis's eviction before it.
func Evict(t testing.TB, c redis.UniversalClient, policy string, keys ...string) int64 {
	t.Helper()
	if len(keys) == 0 {
		t.Fatal("testenv.Evict: no keys")
	}
	ctx, cancel := context.WithTimeout(context.Background(), evictTimeout)
	defer cancel()
	before, err := EvictedKeys(ctx, c)
	if err != nil {
		t.Fatalf("testenv.Evict: %v", err)
	}
	used, err := infoInt(ctx, c, "memory", "used_memory")
	if err != nil {
		t.Fatalf("testenv.Evict: %v", err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
		t.Fatalf("testenv.Evict: config set maxmemory-policy %s: %v", policy, err)
	}
	var filler []string
	defer func() {
		// maxmemory first: the DELs and the next test's writes must not evict.
		bg, cancel := context.WithTimeout(context.Background(), evictTimeout)
		defer cancel()
		if err := c.ConfigSet(bg, "maxmemory", "0").Err(); err != nil {
			t.Errorf("testenv.Evict: config set maxmemory 0: %v", err)
		}
		for len(filler) > 0 {
			n := min(len(filler), 512)
			if err := c.Del(bg, filler[:n]...).Err(); err != nil {
				t.Errorf("testenv.Evict: del filler: %v", err)
				break
			}
			filler = filler[n:]
		}
		if err := c.ConfigSet(bg, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Errorf("testenv.Evict: config set maxmemory-policy noeviction: %v", err)
		}
	}()
	if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+evictHeadroom, 10)).Err(); err != nil {
		t.Fatalf("testenv.Evict: config set maxmemory: %v", err)
	}
	value := strings.Repeat("x", evictFiller)
	for i := range evictMaxSteps {
		n, err := c.Exists(ctx, keys...).Result()
		if err != nil {
			t.Fatalf("testenv.Evict: exists: %v", err)
		}
		if n == 0 {
			after, err := EvictedKeys(ctx, c)
			if err != nil {
				t.Fatalf("testenv.Evict: %v", err)
			}
			if after <= before {
				t.Fatalf("testenv.Evict: keys gone but evicted_keys did not rise (%d): not an eviction", after)
			}
			return after - before
		}
		k := "testenv:evict:filler:" + strconv.Itoa(i)
		if err := c.Set(ctx, k, value, 0).Err(); err != nil {
			// The write may have evicted the last of keys and still not
			// freed enough (its own query buffer counts): look again.
			if n, _ := c.Exists(ctx, keys...).Result(); n == 0 {
				continue
			}
			t.Fatalf("testenv.Evict: %d of %d keys still there and Redis refuses more filler under %s: %v (a key without a TTL under a volatile-* policy is never evicted)", n, len(keys), policy, err)
		}
		filler = append(filler, k)
	}
	t.Fatalf("testenv.Evict: keys still there after %d filler writes", evictMaxSteps)
	return 0
}

// EvictedKeys reads evicted_keys from INFO stats: how many keys Redis has
// evicted under maxmemory since it started (or since CONFIG RESETSTAT).
func EvictedKeys(ctx context.Context, c redis.UniversalClient) (int64, error) {
	return infoInt(ctx, c, "stats", "evicted_keys")
}

func infoInt(ctx context.Context, c redis.UniversalClient, section, field string) (int64, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return 0, fmt.Errorf("info %s: %w", section, err)
	}
	for line := range strings.SplitSeq(s, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":")
		if ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("info " + section + ": no " + field)
}
