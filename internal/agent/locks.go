package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/lockvalue"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/lockversion"
	"github.com/lockgov/lockgov/policy"
)

// NoTTL is Lock.TTL of a lock without an expiry.
const NoTTL time.Duration = -1

// scanBatch is how many keys one SCAN step and one pipeline of PTTL + GET
// cover: memory stays bounded by it, whatever the key count.
const scanBatch = 1000

// Lock is one lock as the stores show it, decoded with the backends' own
// decoders. It never carries the owner token.
type Lock struct {
	Store   string
	Key     string
	Pattern string
	Holder  lockvalue.Holder
	// Age is how long the holder has held it, by its acquired-at (0: not
	// recorded). TTL is what is left of it; NoTTL when it never expires.
	Age, TTL time.Duration
	Fence    uint64
	// Waiters are the sessions queued behind the holder (etcd).
	Waiters int
	// Version names the lock's current value (lockversion): a DELETE
	// that sends it as If-Match deletes the lock only if it is still at
	// it. Redis: the SHA-1 of the value in hex; etcd: the holder entry's
	// mod revision. A digest, never the value or its owner token.
	Version string
}

// Immortal reports whether the lock has no TTL.
func (l Lock) Immortal() bool { return l.TTL == NoTTL }

type lockJSON struct {
	Store      string            `json:"store"`
	Key        string            `json:"key"`
	KeyBase64  []byte            `json:"key_base64,omitempty"` // the key's bytes, when it is not UTF-8
	KeyPattern string            `json:"key_pattern"`
	Holder     *lockvalue.Holder `json:"holder"`
	AgeSeconds float64           `json:"age_seconds"`
	TTLSeconds float64           `json:"ttl_seconds"` // -1: no TTL
	Immortal   bool              `json:"immortal"`
	Fence      uint64            `json:"fence"`
	Waiters    int               `json:"waiters,omitempty"`
	Version    string            `json:"version,omitempty"`
}

// MarshalJSON writes the lock with snake_case names and durations in
// seconds. A key that is not valid UTF-8 is also written as key_base64, as
// detectors.Finding writes it: "key" then has U+FFFD in place of the bytes
// that are not UTF-8, and may name another lock.
func (l Lock) MarshalJSON() ([]byte, error) {
	h := l.Holder
	j := lockJSON{Store: l.Store, Key: l.Key, KeyPattern: l.Pattern, Holder: &h,
		AgeSeconds: l.Age.Seconds(), TTLSeconds: l.TTL.Seconds(), Immortal: l.Immortal(), Fence: l.Fence, Waiters: l.Waiters,
		Version: l.Version}
	if l.Immortal() {
		j.TTLSeconds = -1
	}
	if !utf8.ValidString(l.Key) {
		j.KeyBase64 = []byte(l.Key)
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes; key_base64, when there, is
// the key.
func (l *Lock) UnmarshalJSON(data []byte) error {
	var j lockJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	if j.KeyBase64 != nil {
		j.Key = string(j.KeyBase64)
	}
	*l = Lock{Store: j.Store, Key: j.Key, Pattern: j.KeyPattern, Fence: j.Fence, Waiters: j.Waiters, Version: j.Version,
		Age: time.Duration(j.AgeSeconds * float64(time.Second)), TTL: time.Duration(j.TTLSeconds * float64(time.Second))}
	if j.Holder != nil {
		l.Holder = *j.Holder
	}
	if j.Immortal {
		l.TTL = NoTTL
	}
	return nil
}

// lister reads the locks of one store.
type lister struct {
	patterns []string // Redis SCAN patterns
	match    *policy.Matcher
	now      func() time.Time
}

// list calls visit for each lock of s (until it returns false) and returns
// how many keys it looked at.
func (ls *lister) list(ctx context.Context, s *store, visit func(Lock) bool) (int64, error) {
	if s.etcd != nil {
		return ls.listEtcd(ctx, s, "", visit)
	}
	var scanned int64
	stop := errors.New("stop")
	scanNode := func(ctx context.Context, c redis.Cmdable) error {
		for _, pat := range ls.patterns {
			var cursor uint64
			for {
				keys, next, err := c.Scan(ctx, cursor, pat, scanBatch).Result()
				if err != nil {
					return err
				}
				scanned += int64(len(keys))
				if !ls.redisBatch(ctx, c, s.name, keys, visit) {
					return stop
				}
				if cursor = next; cursor == 0 {
					break
				}
			}
		}
		return nil
	}
	err := forEachPrimary(ctx, s.redis, func(c redis.Cmdable) error { return scanNode(ctx, c) })
	if errors.Is(err, stop) {
		err = nil
	}
	return scanned, err
}

// redisBatch reads PTTL and GET of keys in one pipeline. Keys that are not
// strings, lockgov's companion keys, and keys gone meanwhile are skipped.
func (ls *lister) redisBatch(ctx context.Context, c redis.Cmdable, storeName string, keys []string, visit func(Lock) bool) bool {
	var candidates []string
	for _, k := range keys {
		if !redislock.IsCompanionKey(k) {
			candidates = append(candidates, k)
		}
	}
	if len(candidates) == 0 {
		return true
	}
	pipe := c.Pipeline()
	ttls := make([]*redis.DurationCmd, len(candidates))
	vals := make([]*redis.StringCmd, len(candidates))
	for i, k := range candidates {
		ttls[i] = pipe.PTTL(ctx, k)
		vals[i] = pipe.Get(ctx, k)
	}
	_, _ = pipe.Exec(ctx) // per-command errors below
	now := ls.now()
	for i, k := range candidates {
		v, err := vals[i].Result()
		if err != nil {
			continue // gone, or not a string: not a lock
		}
		ttl, err := ttls[i].Result()
		if err != nil || ttl == -2 {
			continue
		}
		if !visit(ls.redisLock(storeName, k, v, ttl, now)) {
			return false
		}
	}
	return true
}

// redisLock is the Lock of key on a Redis store, whose value is v and PTTL
// ttl (-1: none).
func (ls *lister) redisLock(storeName, key, v string, ttl time.Duration, now time.Time) Lock {
	l := Lock{Store: storeName, Key: key, Holder: redislock.DecodeValue(v), TTL: ttl, Version: lockversion.Redis(v)}
	if ttl < 0 {
		l.TTL = NoTTL
	}
	l.Fence = l.Holder.Fence
	ls.finish(&l, now)
	return l
}

// readRedis reads the lock on key with one pipeline of PTTL and GET, and
// returns its value too: the remediation compares it in its script, and
// the lock and its version are that value's. ok is false when there is no
// lock on key: no such key, one that is not a string, a companion key.
func (ls *lister) readRedis(ctx context.Context, s *store, key string) (l Lock, value string, ok bool, err error) {
	if redislock.IsCompanionKey(key) {
		return l, "", false, nil
	}
	pipe := s.redis.Pipeline()
	ttlCmd := pipe.PTTL(ctx, key)
	getCmd := pipe.Get(ctx, key)
	_, _ = pipe.Exec(ctx) // per-command errors below
	ttl, err := ttlCmd.Result()
	if err != nil {
		return l, "", false, err
	}
	value, err = getCmd.Result()
	switch {
	case errors.Is(err, redis.Nil) || ttl == -2:
		return l, "", false, nil
	case err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE"):
		return l, "", false, nil // not a string: not a lock
	case err != nil:
		return l, "", false, err
	}
	return ls.redisLock(s.name, key, value, ttl, ls.now()), value, true, nil
}

func (ls *lister) finish(l *Lock, now time.Time) {
	if ls.match != nil {
		l.Pattern, _ = ls.match.Match(l.Key)
	} else {
		l.Pattern = policy.Normalize(l.Key)
	}
	if !l.Holder.AcquiredAt.IsZero() {
		l.Age = max(now.Sub(l.Holder.AcquiredAt), 0)
	}
}

// etcdEntry is the head entry of one lock on etcd: the holder's.
type etcdEntry struct {
	key     string // the lock key; an entry of another writer: its etcd key
	kv      []byte
	lease   int64
	rev     int64 // create revision: the fence
	modRev  int64 // the version
	waiters int
}

// etcdLock is the Lock of e; ok is false when e's lease expired since it
// was read (the entry is gone).
func (ls *lister) etcdLock(ctx context.Context, s *store, e *etcdEntry) (l Lock, ok bool, err error) {
	l = Lock{Store: s.name, Key: e.key, Holder: etcdlock.DecodeValue(e.kv), Fence: uint64(e.rev), Waiters: e.waiters, TTL: NoTTL,
		Version: lockversion.Etcd(e.modRev)}
	if e.lease != 0 {
		ttl, err := s.etcd.TimeToLive(ctx, clientv3.LeaseID(e.lease))
		if err != nil {
			return l, false, err
		}
		if ttl.TTL < 0 {
			return l, false, nil
		}
		l.TTL = time.Duration(ttl.TTL) * time.Second
	}
	ls.finish(&l, ls.now())
	return l, true, nil
}

// isForeignEntryKey reports whether key, as a lock's name, is the whole etcd
// key of an entry another writer put under the lock prefix, not in
// etcdlock's "key NUL lease" layout: the detectors report such an entry as
// a lock of its own, by that name.
func isForeignEntryKey(key string) bool {
	_, _, queued := etcdlock.ParseQueueKey(etcdlock.DefaultPrefix, key)
	return !queued && strings.HasPrefix(key, etcdlock.DefaultPrefix)
}

// listEtcd lists the locks under etcdlock.DefaultPrefix (only key's when
// key is set, every lock when it is empty), page by page. The holder of a
// lock is its entry with the lowest create revision, which is also its
// fence. The entries of one lock key are adjacent in key order (key, NUL,
// lease ID), so a lock is complete once the range moves past its key: only
// the current key is kept, and memory stays bounded by one page whatever
// the key count. Locks are visited in key order. An entry another writer
// put under the prefix (not in that layout) is a lock of its own named by
// its whole etcd key, as the detectors name it (listed when key is empty),
// visited where its etcd key falls.
func (ls *lister) listEtcd(ctx context.Context, s *store, key string, visit func(Lock) bool) (int64, error) {
	prefix := etcdlock.DefaultPrefix
	start := prefix
	if key != "" {
		start = prefix + key + "\x00"
	}
	end := clientv3.GetPrefixRangeEnd(start)
	var scanned int64
	var cur *etcdEntry
	var rev int64 // every page at the first page's revision: one snapshot
	// emit visits e; more is false once visit says stop.
	emit := func(e *etcdEntry) (more bool, err error) {
		if e == nil {
			return true, nil
		}
		l, ok, err := ls.etcdLock(ctx, s, e)
		if err != nil || !ok {
			return err == nil, err
		}
		return visit(l), nil
	}
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(scanBatch)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.etcd.Get(ctx, start, opts...)
		if err != nil {
			return scanned, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			scanned++
			k, _, ok := etcdlock.ParseQueueKey(prefix, string(kv.Key))
			if !ok {
				if key != "" {
					continue // not key's queue
				}
				// Visited on its own: cur, whose entries it may sort
				// between, stays the current lock.
				if more, err := emit(&etcdEntry{key: string(kv.Key), kv: kv.Value, lease: kv.Lease, rev: kv.CreateRevision, modRev: kv.ModRevision}); err != nil || !more {
					return scanned, err
				}
				continue
			}
			if cur != nil && cur.key != k {
				e := cur
				cur = nil
				if more, err := emit(e); err != nil || !more {
					return scanned, err
				}
			}
			// The lease the entry is attached to, not the one its key
			// names: an entry put without a lease never expires.
			switch {
			case cur == nil:
				cur = &etcdEntry{key: k, kv: kv.Value, lease: kv.Lease, rev: kv.CreateRevision, modRev: kv.ModRevision}
			case kv.CreateRevision < cur.rev:
				cur.kv, cur.lease, cur.rev, cur.modRev = kv.Value, kv.Lease, kv.CreateRevision, kv.ModRevision
				cur.waiters++
			default:
				cur.waiters++
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	_, err := emit(cur)
	return scanned, err
}

// ErrEmptyKey is returned for a lock key that is empty: no lock has it (on
// etcd the empty key would name the whole lock prefix).
var ErrEmptyKey = errors.New("the lock key is empty")

// show returns the lock on key in s, or ok false when there is none. Its
// errors do not name the store: the caller does.
func (ls *lister) show(ctx context.Context, s *store, key string) (l Lock, ok bool, err error) {
	if key == "" {
		// listEtcd reads every lock for an empty key: it would show another
		// key's lock.
		return l, false, ErrEmptyKey
	}
	if s.etcd != nil {
		_, err = ls.listEtcd(ctx, s, key, func(x Lock) bool { l, ok = x, true; return false })
		if ok || err != nil || !isForeignEntryKey(key) {
			return l, ok, err
		}
		resp, err := s.etcd.Get(ctx, key)
		if err != nil || len(resp.Kvs) == 0 {
			return l, false, err
		}
		kv := resp.Kvs[0]
		return ls.etcdLock(ctx, s, &etcdEntry{key: key, kv: kv.Value, lease: kv.Lease, rev: kv.CreateRevision, modRev: kv.ModRevision})
	}
	l, _, ok, err = ls.readRedis(ctx, s, key)
	return l, ok, err
}
