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
// and the lease ID of the session that queued it.
func ParseQueueKey(prefix, etcdKey string) (key string, leaseID int64, ok bool) {
	rest, ok := strings.CutPrefix(etcdKey, prefix)
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, 0)
	if i <= 0 || len(rest)-i-1 != 16 {
		return "", 0, false
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
