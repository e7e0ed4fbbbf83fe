package redislock

import (
	"strconv"
	"strings"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/lockvalue"
)

// Keys is every Redis key and channel one lock uses, for tools that read
// lockgov's locks (the agent, `lockgov locks`). All of them hash to the lock
// key's Cluster slot.
type Keys struct {
	Lock    string // the lock: "<token> <fence> <json>" under PX
	Fence   string // the fence counter, under PX
	Channel string // release notifications: each Locker subscribes Channel+":"+its id (pub/sub channels, not keys)
	Queue   string // Fair mode: waiter tokens, oldest first
	Waiters string // Fair mode: waiter deadlines
}

// KeysFor returns the keys of the lock on key. It fails, wrapping
// instrument.ErrInvalidKey, for a key Acquire refuses: one ValidateKey
// refuses, or whose braces do not form a Redis hash tag.
func KeysFor(key string) (Keys, error) {
	// A key Acquire refuses has no lock; without this, "" had companions
	// ("{}:fence") outside its slot (found by FuzzKeysFor).
	if err := instrument.ValidateKey(key); err != nil {
		return Keys{}, err
	}
	k, err := keysFor(key)
	if err != nil {
		return Keys{}, err
	}
	return Keys{Lock: k.lock, Fence: k.fence, Channel: k.channel, Queue: k.queue, Waiters: k.waiters}, nil
}

// IsCompanionKey reports whether k is a key lockgov keeps beside a lock key
// (its fence counter, Fair-mode queue and waiter deadlines, or a release
// marker), not a lock: a scanner matching lock:* skips these.
func IsCompanionKey(k string) bool {
	base, ok := "", false
	for _, suffix := range []string{":fence", ":queue", ":waiters"} {
		if b, found := strings.CutSuffix(k, suffix); found {
			base, ok = b, true
			break
		}
	}
	if !ok {
		i := strings.LastIndex(k, ":rel:")
		if i < 0 || !isHex(k[i+len(":rel:"):], 24) {
			return false
		}
		base = k[:i]
	}
	if strings.HasPrefix(base, "{") && strings.HasSuffix(base, "}") && len(base) > 2 {
		return true // "{key}:fence", the companion of an untagged key
	}
	return hashTag(base) != "" // "key{tag}:fence", the companion of a tagged key
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// DecodeValue reads the holder from a lock value as redislock stores it:
// "<token> <fence> <json>". The owner token is dropped, never returned. A
// value in any other form (a bare token, redsync's or bsm/redislock's
// values, garbage) is a foreign holder, never an error: the lock exists, and
// who holds it is unknown.
func DecodeValue(v string) lockvalue.Holder {
	tok, rest, ok := strings.Cut(v, " ")
	if !ok || tok == "" {
		return lockvalue.Foreign()
	}
	digits, js, ok := strings.Cut(rest, " ")
	if !ok {
		return lockvalue.Foreign()
	}
	fence, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return lockvalue.Foreign()
	}
	h, err := lockvalue.Decode([]byte(js))
	if err != nil {
		return lockvalue.Foreign()
	}
	if h.Fence == 0 {
		h.Fence = fence
	}
	return h
}
