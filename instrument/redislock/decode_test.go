package redislock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// TestDecodeValue_ReadsBackTheHolderThatWroteIt holds the round trip the
// agent depends on: what a Locker stores decodes to that Locker's holder,
// with the lease's fence, and without the owner token.
func TestDecodeValue_ReadsBackTheHolderThatWroteIt(t *testing.T) {
	t.Parallel()
	_, c := setup(t)
	l := newLocker(t, c, redislock.WithService("payments"), redislock.WithInstance("pod-3"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := time.Now().Add(-time.Second)
	lease, err := l.Acquire(ctx, "lock:order:{o-1}", instrument.WithTTL(7*time.Second), instrument.WithMeta(map[string]string{"order": "o-1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	raw, err := c.Get(ctx, "lock:order:{o-1}").Result()
	if err != nil {
		t.Fatal(err)
	}
	h := redislock.DecodeValue(raw)
	if h.Foreign || h.Service != "payments" || h.Instance != "pod-3" || h.PID == 0 || h.Host == "" || h.Version == "" {
		t.Fatalf("holder %+v from %q", h, raw)
	}
	if h.Fence != lease.Fence() || h.TTL != 7*time.Second || h.Labels["order"] != "o-1" || h.AcquiredAt.Before(before) {
		t.Fatalf("holder %+v, want fence %d, TTL 7s, the label and a recent acquired-at", h, lease.Fence())
	}
	tok, _, _ := strings.Cut(raw, " ")
	for _, s := range []string{h.Service, h.Instance, h.Host, h.TraceID, h.Version} {
		if strings.Contains(s, tok) {
			t.Fatal("the decoded holder carries the owner token")
		}
	}
}

func TestDecodeValue_OtherLibrariesValuesAreForeign(t *testing.T) {
	t.Parallel()
	for name, v := range map[string]string{
		"bare token":             "x7Qf3bRk2V9pLq0sYt1uWw",
		"redsync":                "Hn0mfBRhbDx5LkO7nQrf3A==",
		"bsm/redislock":          "gGv8RqJ7lFr4cC0WqR3Y1Qx{\"job\":1}",
		"bsm/redislock metadata": "gGv8RqJ7lFr4cC0WqR3Y1Q order-42",
		"json":                   `{"owner":"someone"}`,
		"empty":                  "",
		"token and fence only":   "tok 42",
		"token, fence, not json": "tok 42 hello",
		"negative fence":         `tok -1 {"service":"a","pid":1}`,
	} {
		if h := redislock.DecodeValue(v); !h.Foreign {
			t.Errorf("%s: %q decoded as %+v, want foreign", name, v, h)
		}
	}
}

func TestKeysFor_AndCompanionKeys(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"lock:order:1", "lock:quota:{42}"} {
		k, err := redislock.KeysFor(key)
		if err != nil {
			t.Fatal(err)
		}
		if k.Lock != key || redislock.IsCompanionKey(k.Lock) {
			t.Errorf("%s: lock key %q, companion %v", key, k.Lock, redislock.IsCompanionKey(k.Lock))
		}
		for _, c := range []string{k.Fence, k.Queue, k.Waiters} {
			if !redislock.IsCompanionKey(c) {
				t.Errorf("%s: %q is not recognised as a companion key", key, c)
			}
		}
	}
	if _, err := redislock.KeysFor("a}b{"); err == nil {
		t.Error("a key whose braces form no hash tag has keys")
	}
	for _, k := range []string{"lock:fence", "lock:x:queue", "{}:fence", "lock:{a}:rel:xyz"} {
		if redislock.IsCompanionKey(k) {
			t.Errorf("%q taken for a companion key", k)
		}
	}
	if !redislock.IsCompanionKey("{lock:a}:rel:0123456789abcdef01234567") {
		t.Error("a release marker is not recognised as a companion key")
	}
}

func FuzzDecodeValue(f *testing.F) {
	f.Add(`tok 17 {"service":"a","pid":1,"fence":17}`)
	f.Add("x7Qf3bRk2V9pLq0sYt1uWw")
	f.Add("tok 1 {")
	f.Fuzz(func(t *testing.T, v string) {
		h := redislock.DecodeValue(v)
		if tok, _, ok := strings.Cut(v, " "); ok && len(tok) >= 8 && !h.Foreign && strings.Contains(h.Service+h.Instance+h.Host, tok) && !strings.Contains(v[len(tok):], tok) {
			t.Fatalf("the token %q leaked into the holder %+v", tok, h)
		}
	})
}
