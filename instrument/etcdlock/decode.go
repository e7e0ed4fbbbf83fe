package etcdlock

import (
	"strconv"
	"strings"

	"github.com/lockgov/lockgov/instrument/lockvalue"
)

// Key layout, for tools that read lockgov's locks (the agent, `lockgov
// locks`). Every Acquire of key puts one entry under QueuePrefix(key):
// prefix + key + "\x00" + the session lease ID in 16 hex digits, attached to
// that lease. The entry with the lowest create revision holds the lock; its
// create revision is the fence; the others wait in that order.

// ParseQueueKey splits an entry's etcd key, under prefix, into the lock key
// and the lease ID of the session that queued it. ok is false for any other
// name: one etcdlock does not write (another writer's entry under the
// prefix). etcdlock writes the lease ID as 16 lower-case hex digits after
// the first NUL, as a valid lock key has no NUL (instrument.ValidateKey
// refuses control bytes); so a name with a second NUL is not a queue entry,
// although it would read as one of a key holding a NUL: "k\x00<lease>\x00<16
// hex>", sorting among the entries of k, is not a lock "k\x00<lease>" that
// would split k's queue in two for a reader ranging over the prefix.
func ParseQueueKey(prefix, etcdKey string) (key string, leaseID int64, ok bool) {
	rest, ok := strings.CutPrefix(etcdKey, prefix)
	if !ok {
		return "", 0, false
	}
	i := strings.IndexByte(rest, 0)
	if i <= 0 || len(rest)-i-1 != 16 {
		return "", 0, false
	}
	for _, c := range []byte(rest[i+1:]) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", 0, false // not %016x: upper case, a sign, a space
		}
	}
	id, err := strconv.ParseUint(rest[i+1:], 16, 64)
	if err != nil {
		return "", 0, false
	}
	return rest[:i], int64(id), true
}

// DecodeValue reads the holder from an entry's value (JSON; etcdlock keeps
// no owner token in values: ownership is the session lease). The fence is
// not in the value: it is the entry's create revision, which the caller
// reads from the KeyValue. A value lockgov did not write is a foreign
// holder, never an error.
func DecodeValue(v []byte) lockvalue.Holder {
	h, err := lockvalue.Decode(v)
	if err != nil {
		return lockvalue.Foreign()
	}
	return h
}
