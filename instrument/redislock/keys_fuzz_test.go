package redislock_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// slot is Redis Cluster's key slot: CRC16 (XMODEM) of the hash tag, or of
// the whole key without one, mod 16384. Written here from the Cluster spec,
// independently of keys.go.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// FuzzKeysFor holds the key layout the scripts and the agent rely on: every
// key and the channel of a lock hash to the lock key's Cluster slot (one
// script may touch them all on a Cluster), the companions are recognised as
// companions and differ from the lock, and a refusal wraps ErrInvalidKey
// with ValidateKey's reason or naming the key.
func FuzzKeysFor(f *testing.F) {
	for _, s := range []string{"lock:order:42", "lock:quota:{42}", "{a}", "a{b}c", "a}b", "a{}b", "{", "x}{y}", "{{a}}", "lock:{order}:pay:{7}", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		k, err := redislock.KeysFor(key)
		if err != nil {
			if !errors.Is(err, instrument.ErrInvalidKey) {
				t.Fatalf("KeysFor(%q) error %q does not wrap ErrInvalidKey", key, err)
			}
			// ValidateKey's reason (where and why), or the braces, naming the key.
			if verr := instrument.ValidateKey(key); verr == nil && !strings.Contains(err.Error(), strconv.Quote(key)) {
				t.Fatalf("KeysFor(%q) error %q does not name the key", key, err)
			}
			return
		}
		if k.Lock != key {
			t.Fatalf("KeysFor(%q).Lock = %q", key, k.Lock)
		}
		want := slot(key)
		for _, c := range []string{k.Fence, k.Channel, k.Queue, k.Waiters} {
			if c == key {
				t.Fatalf("KeysFor(%q): companion %q is the lock key itself", key, c)
			}
			if s := slot(c); s != want {
				t.Fatalf("KeysFor(%q): %q hashes to slot %d, the lock to %d", key, c, s, want)
			}
		}
		for _, c := range []string{k.Fence, k.Queue, k.Waiters} {
			if !redislock.IsCompanionKey(c) {
				t.Fatalf("KeysFor(%q): %q is not recognised as a companion key", key, c)
			}
		}
	})
}

// FuzzValidateKey holds that ValidateKey accepts exactly the keys of its
// contract (1..MaxKeyLen bytes of UTF-8 without C0, DEL or C1 control
// characters) and that a refusal wraps ErrInvalidKey and says why.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"lock:a", "", "a\nb", "\x7f", "\u0085", "\xff", "é", strings.Repeat("k", instrument.MaxKeyLen), strings.Repeat("k", instrument.MaxKeyLen+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := instrument.ValidateKey(key)
		ok := key != "" && len(key) <= instrument.MaxKeyLen && strings.ToValidUTF8(key, "") == key &&
			!strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r >= 0x7f && r <= 0x9f })
		if (err == nil) != ok {
			t.Fatalf("ValidateKey(%q) = %v; the contract says valid = %v", key, err, ok)
		}
		if err != nil && (!errors.Is(err, instrument.ErrInvalidKey) ||
			!strings.ContainsAny(err.Error(), "0123456789") && !strings.Contains(err.Error(), "empty")) {
			t.Fatalf("ValidateKey(%q) error %q: want ErrInvalidKey saying where or why", key, err)
		}
	})
}
