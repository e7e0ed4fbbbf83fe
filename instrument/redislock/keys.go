package redislock

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/lockgov/lockgov/instrument"
)

// keySet is every name one lock uses in Redis. All of them hash to the slot
// of the lock key, so one script can touch them on Redis Cluster.
type keySet struct {
	base    string // prefix of the companion keys: key with a hash tag, else "{key}"
	lock    string // the lock itself: "<token> <fence> <json>" under PX
	fence   string // the fence counter, under PX TTL+retention
	channel string // release notifications: a Locker subscribes channel+":"+its id
	queue   string // fair mode: waiter tokens, oldest first
	waiters string // fair mode: waiter deadlines
}

// keysFor derives the fence key and the channel from the lock key.
//
// When the key carries a hash tag ("lock:quota:{42}"), appending a suffix
// keeps the tag, so the fence key is key+":fence". Otherwise the whole key is
// the tag: "{key}:fence" hashes to the slot of key. A key with braces that
// do not form a hash tag ("a}b", "a{}b") cannot be given a same-slot
// companion and is refused.
func keysFor(key string) (keySet, error) {
	if hashTag(key) != "" {
		return companions(key, key), nil
	}
	if strings.ContainsAny(key, "{}") {
		return keySet{}, fmt.Errorf("%w: key %q has braces that do not form a Redis hash tag", instrument.ErrInvalidKey, key)
	}
	return companions(key, ""), nil
}

// companions builds the names beside lock, which all start with base
// ("": "{lock}"), in one allocation: slices of one string.
func companions(lock, base string) keySet {
	const fence, channel, queue, waiters = ":fence", ":released", ":queue", ":waiters"
	braced := base == ""
	n := len(base)
	if braced {
		n = len(lock) + 2
	}
	var b strings.Builder
	b.Grow(4*n + len(fence) + len(channel) + len(queue) + len(waiters) + 2)
	writeBase := func() {
		if braced {
			b.WriteByte('{')
			b.WriteString(lock)
			b.WriteByte('}')
		} else {
			b.WriteString(base)
		}
	}
	for _, s := range [...]string{fence, channel, queue, waiters} {
		writeBase()
		b.WriteString(s)
	}
	all := b.String()
	k := keySet{base: all[:n], lock: lock}
	at := 0
	next := func(suffix string) string {
		s := all[at : at+n+len(suffix)]
		at += len(s)
		return s
	}
	k.fence, k.channel, k.queue, k.waiters = next(fence), next(channel), next(queue), next(waiters)
	return k
}

// hashTag returns the hash tag of key by Redis Cluster's rule: the text
// between the first '{' and the first '}' after it, if not empty.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}

// tombstone is the key a release by tok leaves behind (briefly, under PX),
// so that a retry of that same release whose first reply was lost can tell
// "this token released it" from "not this token's". Its name carries a hash
// of the token, never the token: tokens are capabilities and key names show
// up in SCAN, MONITOR and the agent.
func (k keySet) tombstone(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	var h [24]byte
	hex.Encode(h[:], sum[:12])
	var b strings.Builder // one allocation
	b.Grow(len(k.base) + len(":rel:") + len(h))
	b.WriteString(k.base)
	b.WriteString(":rel:")
	b.Write(h[:])
	return b.String()
}
