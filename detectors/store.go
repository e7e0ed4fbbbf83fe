package detectors

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/lockvalue"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/lockversion"
	"github.com/lockgov/lockgov/internal/shellquote"
)

// Store is one Redis or etcd deployment the detectors read. NewRedisStore
// and NewEtcdStore make one; the interface is sealed (its scanning methods
// are unexported) so that every detector reads a store the same way.
type Store interface {
	// Addr is the store's address for findings and logs, without a
	// password.
	Addr() string
	// Backend is "redis" or "etcd".
	Backend() string
	// Heartbeats returns the fleet heartbeats stored there under a TTL (a
	// lease on etcd), as a publisher writes them, sorted by instance.
	// Values that are not heartbeats are skipped (the detectors still
	// count a heartbeat key under a TTL that does not decode as its
	// instance alive).
	Heartbeats(ctx context.Context) ([]*fleet.Heartbeat, error)
	// ScanLocks calls fn for every lock in the store whose key matches one
	// of the glob patterns (Redis; etcd ignores them: every entry under the
	// lock prefix is a lock), a batch at a time, never holding more than
	// one batch. fn is never called concurrently.
	ScanLocks(ctx context.Context, patterns []string, fn func(Lock) error) error

	// heartbeats is Heartbeats plus the heartbeat keys under a TTL (a
	// lease) that do not decode (over fleet.MaxBeatBytes, damaged): such a
	// key proves its process alive without saying what it holds.
	heartbeats(ctx context.Context) (hbs []*fleet.Heartbeat, unreadable []unreadableBeat, err error)
	scan(ctx context.Context, patterns []string, needTTL func(*Lock) bool, fn func([]Lock) error) error
	get(ctx context.Context, key string) (value []byte, found bool, err error)
	cli() string // the command prefix an operator runs: redis-cli -h … -p … / etcdctl --endpoints=…
	// eviction is what every node holding keys says of its eviction
	// settings (Redis INFO); nil for a store that does not evict (etcd).
	eviction(ctx context.Context) ([]nodeEviction, error)
}

// Lock is one lock as a store holds it.
type Lock struct {
	// Key is the lock key (what the caller passed to Acquire).
	Key string
	// StoreKey is the key that holds it in the store: Key on Redis, the
	// head queue entry on etcd.
	StoreKey string
	Holder   lockvalue.Holder
	// NoTTL is true when the key never expires (Redis: no PX; etcd: no
	// lease). Otherwise TTL is the time left, when TTLKnown.
	NoTTL    bool
	TTL      time.Duration
	TTLKnown bool
	// GrantedTTL is the TTL of the etcd lease (0 on Redis or when unknown).
	GrantedTTL time.Duration
	// Lease is the etcd lease ID of the holder's entry (0 on Redis).
	Lease int64
	// LeaseKeys is the number of keys attached to Lease, the entry among
	// them, when its TTL was read (TTLKnown); 0 otherwise. Revoking the
	// lease deletes them all.
	LeaseKeys int
	// Fence is the lock's fence (etcd: the head entry's create revision).
	Fence uint64
	// Waiters is the number of queued etcd entries behind the holder.
	Waiters int
	// QueueOf is, for another writer's etcd entry under a lock key's queue
	// prefix ("<key>\x00other", not etcdlock's layout), that lock key:
	// etcdlock counts the entry as a holder or waiter of it.
	QueueOf string
	// Unreadable is set when the value could not be read as a string (a
	// Redis key of another type): Holder is foreign.
	Unreadable string
	// Version is the lock's version when it has no TTL (NoTTL), the one
	// the agent's remediation takes as If-Match; empty otherwise (it costs
	// a digest of the value on Redis, which a healthy lock need not pay).
	// Redis: the SHA-1 of the value in hex; etcd: the holder entry's mod
	// revision. It never carries the value or its owner token.
	Version string
}

// StoreOption configures a Store.
type StoreOption interface{ apply(*storeConfig) }

type storeConfig struct {
	addr   string
	count  int
	prefix string
}

type storeOptionFunc func(*storeConfig)

func (f storeOptionFunc) apply(c *storeConfig) { f(c) }

// WithAddr sets the address findings name (default: derived from the client,
// without credentials). Pass a URL through RedactURL first.
func WithAddr(addr string) StoreOption {
	return storeOptionFunc(func(c *storeConfig) { c.addr = addr })
}

// WithScanCount sets the SCAN COUNT hint and the batch size of pipelined
// reads (Redis) or of a range page (etcd); default 1000.
func WithScanCount(n int) StoreOption {
	return storeOptionFunc(func(c *storeConfig) { c.count = n })
}

// WithLockPrefix sets the etcd lock prefix (default etcdlock.DefaultPrefix).
func WithLockPrefix(p string) StoreOption {
	return storeOptionFunc(func(c *storeConfig) { c.prefix = p })
}

// DefaultScanCount is the default SCAN COUNT and batch size.
const DefaultScanCount = 1000

// ErrInvalid is wrapped by errors about a detector's or store's options.
var ErrInvalid = errors.New("detectors: invalid option")

func newStoreConfig(opts []StoreOption) (storeConfig, error) {
	c := storeConfig{count: DefaultScanCount, prefix: etcdlock.DefaultPrefix}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.count < 1 || c.count > 100000 {
		return c, fmt.Errorf("%w: scan count %d, want 1..100000", ErrInvalid, c.count)
	}
	if c.prefix == "" {
		return c, fmt.Errorf("%w: empty etcd lock prefix", ErrInvalid)
	}
	return c, nil
}

// RedactURL returns raw with any password removed (user names stay), for
// WithAddr and logs. A string that does not parse as a URL is returned
// with everything before the last '@' cut, so a password cannot leak
// through a malformed URL either.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		if i := strings.LastIndexByte(raw, '@'); i >= 0 {
			return raw[i+1:]
		}
		return raw
	}
	if u.User != nil {
		if name := u.User.Username(); name != "" {
			u.User = url.User(name)
		} else {
			u.User = nil
		}
	}
	q := u.Query()
	for k := range q {
		if lk := strings.ToLower(k); strings.Contains(lk, "pass") || strings.Contains(lk, "token") {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// RedisStore reads a Redis deployment: a single node, a Sentinel-managed
// primary (the UniversalClient redis.NewFailoverClient returns), or a
// Cluster, every primary of which is scanned.
type RedisStore struct {
	c      redis.UniversalClient
	addr   string
	cliCmd string
	count  int
}

// NewRedisStore returns a Store over c, a *redis.Client (single node or
// Sentinel failover client) or a *redis.ClusterClient. A Ring is refused:
// its keys cannot be scanned shard by shard through this interface.
func NewRedisStore(c redis.UniversalClient, opts ...StoreOption) (*RedisStore, error) {
	cfg, err := newStoreConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &RedisStore{c: c, count: cfg.count}
	switch cc := c.(type) {
	case *redis.Client:
		o := cc.Options()
		scheme := "redis"
		if o.TLSConfig != nil {
			scheme = "rediss"
		}
		s.addr = scheme + "://" + o.Addr
		if o.DB != 0 {
			s.addr += "/" + strconv.Itoa(o.DB)
		}
		s.cliCmd = redisCLI(o.Addr, o.Username, o.Password != "", o.TLSConfig != nil, o.DB, false)
	case *redis.ClusterClient:
		o := cc.Options()
		if len(o.Addrs) == 0 {
			return nil, fmt.Errorf("%w: cluster client without addresses", ErrInvalid)
		}
		scheme := "redis"
		if o.TLSConfig != nil {
			scheme = "rediss"
		}
		s.addr = scheme + "://" + strings.Join(o.Addrs, ",") + "?cluster=1"
		s.cliCmd = redisCLI(o.Addrs[0], o.Username, o.Password != "", o.TLSConfig != nil, 0, true)
	case nil:
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalid)
	default:
		return nil, fmt.Errorf("%w: Redis client %T is not supported (use *redis.Client or *redis.ClusterClient)", ErrInvalid, c)
	}
	if cfg.addr != "" {
		s.addr = cfg.addr
	}
	return s, nil
}

func redisCLI(addr, user string, pass, tls bool, db int, cluster bool) string {
	var b strings.Builder
	b.WriteString("redis-cli")
	if cluster {
		b.WriteString(" -c")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = addr, "6379"
	}
	if host == "FailoverClient" { // a Sentinel client does not expose its primary's address
		b.WriteString(" -h PRIMARY_HOST -p PRIMARY_PORT")
	} else {
		b.WriteString(" -h " + shellquote.Quote(host) + " -p " + shellquote.Quote(port))
	}
	if tls {
		b.WriteString(" --tls")
	}
	if user != "" {
		b.WriteString(" --user " + shellquote.Quote(user))
	}
	if pass {
		b.WriteString(" --askpass")
	}
	if db != 0 {
		b.WriteString(" -n " + strconv.Itoa(db))
	}
	return b.String()
}

// Addr returns the redacted address.
func (s *RedisStore) Addr() string { return s.addr }

// Backend returns "redis".
func (s *RedisStore) Backend() string { return "redis" }

func (s *RedisStore) cli() string { return s.cliCmd }

// eachNode runs fn on every node holding keys: the one node, or every
// Cluster primary (concurrently).
func (s *RedisStore) eachNode(ctx context.Context, fn func(ctx context.Context, c *redis.Client) error) error {
	if cc, ok := s.c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, fn)
	}
	return fn(ctx, s.c.(*redis.Client))
}

// scanKeys SCANs match on node c in COUNT batches and calls batch with each
// non-empty batch of keys.
func (s *RedisStore) scanKeys(ctx context.Context, c *redis.Client, match string, batch func([]string) error) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, match, int64(s.count)).Result()
		if err != nil {
			return fmt.Errorf("detectors: SCAN %s on %s: %w", match, c.Options().Addr, err)
		}
		if len(keys) > 0 {
			if err := batch(keys); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// Heartbeats reads every lockgov:fleet:* key (on every Cluster primary).
func (s *RedisStore) Heartbeats(ctx context.Context) ([]*fleet.Heartbeat, error) {
	hbs, _, err := s.heartbeats(ctx)
	return hbs, err
}

func (s *RedisStore) heartbeats(ctx context.Context) ([]*fleet.Heartbeat, []unreadableBeat, error) {
	var mu sync.Mutex
	var out []*fleet.Heartbeat
	var unreadable []unreadableBeat
	err := s.eachNode(ctx, func(ctx context.Context, c *redis.Client) error {
		return s.scanKeys(ctx, c, globEscape(fleet.RedisPrefix)+"*", func(keys []string) error {
			// One pipeline of GET + PTTL per key, one round trip: MGET
			// would fail across Cluster slots. Only a key under a TTL is a
			// heartbeat: a publisher writes every beat with one, so a key
			// without one (PERSIST, a copy that dropped TTLs), or gone
			// since, proves nothing, whether or not its value decodes.
			pipe := c.Pipeline()
			gets := make([]*redis.StringCmd, len(keys))
			ttls := make([]*redis.DurationCmd, len(keys))
			for i, k := range keys {
				gets[i], ttls[i] = pipe.Get(ctx, k), pipe.PTTL(ctx, k)
			}
			_, _ = pipe.Exec(ctx)
			var hbs []*fleet.Heartbeat
			var alive []unreadableBeat
			var moved []string // instances whose key is in a slot moving away from c
			for i, cmd := range gets {
				v, err := cmd.Bytes()
				switch {
				case err == nil:
				case errors.Is(err, redis.Nil) || isWrongType(err):
					continue
				case redirected(err) || redirected(ttls[i].Err()):
					if inst, ok := fleet.InstanceFromKey(keys[i]); ok {
						moved = append(moved, inst)
					}
					continue
				default:
					return fmt.Errorf("detectors: read heartbeats on %s: %w", c.Options().Addr, err)
				}
				// A TTL that could not be read is no answer: taken for
				// none, it would make a live process's locks holder_dead.
				d, err := ttls[i].Result()
				if redirected(err) {
					if inst, ok := fleet.InstanceFromKey(keys[i]); ok {
						moved = append(moved, inst)
					}
					continue
				}
				if err != nil {
					return fmt.Errorf("detectors: read the TTLs of heartbeats on %s: %w", c.Options().Addr, err)
				}
				if d <= 0 {
					continue
				}
				if hb, err := fleet.Decode(v); err == nil {
					hbs = append(hbs, hb)
				} else if inst, ok := fleet.InstanceFromKey(keys[i]); ok {
					alive = append(alive, parseUnreadable(inst, v))
				}
			}
			more, moreAlive, err := s.lookupBeats(ctx, moved)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			out = append(out, hbs...)
			out = append(out, more...)
			unreadable = append(unreadable, alive...)
			unreadable = append(unreadable, moreAlive...)
			return nil
		})
	})
	if err != nil {
		return nil, nil, err
	}
	sortBeats(out)
	return out, unreadable, nil
}

// redirected reports whether err is a Cluster node's MOVED or ASK: the
// key's slot is being moved (resharding) or has moved away from the node a
// scan found the key on. A scan SCANs each primary and reads what it found
// there from the same node, which answers so for a key it lists but no
// longer serves (ASK: moved on; MOVED: a key the importing node holds but
// does not own yet). Those keys are read again through the Cluster client,
// which follows the redirect, instead of failing the read: a resharding is
// routine, and the agent would otherwise report the store unreadable for
// as long as one lasts.
func redirected(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED ") || redis.HasErrorPrefix(err, "ASK ")
}

// rereadLocks appends to batch the locks of keys read again, by key,
// through the Cluster client (see redirected). A key gone since is left
// out; one a scan of another primary also returned is reported once
// (Locks dedupes by key, ScanLocks' callers see what SCAN would: a key at
// most twice).
func (s *RedisStore) rereadLocks(ctx context.Context, keys []string, batch []Lock) ([]Lock, error) {
	if len(keys) == 0 {
		return batch, nil
	}
	pipe := s.c.Pipeline()
	pttls := make([]*redis.DurationCmd, len(keys))
	gets := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		pttls[i], gets[i] = pipe.PTTL(ctx, k), pipe.Get(ctx, k)
	}
	_, _ = pipe.Exec(ctx)
	for i, k := range keys {
		l, ok, err := lockOf(k, pttls[i], gets[i])
		if err != nil {
			return nil, fmt.Errorf("detectors: read lock on %s: %w", s.addr, err)
		}
		if ok {
			batch = append(batch, l)
		}
	}
	return batch, nil
}

// lookupBeats reads, key by key through the Cluster client, the heartbeats
// of instances a scan did not return (Locks.Detect asks for those seen
// earlier, whose locks would otherwise be holder_dead) or could not read
// where it found them (redirected). A scan reads each
// Cluster primary in turn: a heartbeat key that a resharding moves from a
// primary not yet scanned to one already scanned is on neither when each
// is read. GET and PTTL by key follow the move (MOVED, ASK), so the key is
// found wherever it is. A single node's SCAN returns every key present for
// the whole scan, so only a Cluster asks.
func (s *RedisStore) lookupBeats(ctx context.Context, instances []string) ([]*fleet.Heartbeat, []unreadableBeat, error) {
	cc, ok := s.c.(*redis.ClusterClient)
	if !ok || len(instances) == 0 {
		return nil, nil, nil
	}
	pipe := cc.Pipeline()
	gets := make([]*redis.StringCmd, len(instances))
	ttls := make([]*redis.DurationCmd, len(instances))
	for i, inst := range instances {
		k := fleet.RedisKey(inst)
		gets[i], ttls[i] = pipe.Get(ctx, k), pipe.PTTL(ctx, k)
	}
	_, _ = pipe.Exec(ctx)
	var hbs []*fleet.Heartbeat
	var alive []unreadableBeat
	for i, cmd := range gets {
		v, err := cmd.Bytes()
		switch {
		case err == nil:
		case errors.Is(err, redis.Nil) || isWrongType(err):
			continue
		default:
			return nil, nil, fmt.Errorf("detectors: read heartbeats on %s: %w", s.addr, err)
		}
		d, err := ttls[i].Result()
		if err != nil {
			return nil, nil, fmt.Errorf("detectors: read the TTLs of heartbeats on %s: %w", s.addr, err)
		}
		if d <= 0 {
			continue
		}
		if hb, err := fleet.Decode(v); err == nil {
			hbs = append(hbs, hb)
		} else {
			alive = append(alive, parseUnreadable(instances[i], v))
		}
	}
	return hbs, alive, nil
}

func sortBeats(hbs []*fleet.Heartbeat) {
	sort.Slice(hbs, func(i, j int) bool { return hbs[i].Instance < hbs[j].Instance })
}

func isWrongType(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE")
}

// ScanLocks implements Store.
func (s *RedisStore) ScanLocks(ctx context.Context, patterns []string, fn func(Lock) error) error {
	return s.scan(ctx, patterns, nil, func(ls []Lock) error {
		for _, l := range ls {
			if err := fn(l); err != nil {
				return err
			}
		}
		return nil
	})
}

// scan SCANs each glob on every primary and reads each batch with one
// pipeline of PTTL + GET that also carries the next SCAN, so a batch costs
// one round trip. A key matched by an earlier glob is skipped, so
// overlapping globs report a key once; companion keys (fences, queues,
// release markers) and heartbeats are skipped.
func (s *RedisStore) scan(ctx context.Context, patterns []string, _ func(*Lock) bool, fn func([]Lock) error) error {
	globs := compileGlobs(patterns)
	var mu sync.Mutex
	return s.eachNode(ctx, func(ctx context.Context, c *redis.Client) error {
		addr := c.Options().Addr
		pttls := make([]*redis.DurationCmd, 0, s.count)
		gets := make([]*redis.StringCmd, 0, s.count)
		keep := make([]string, 0, s.count)
		batch := make([]Lock, 0, s.count)
		// args backs the PTTL and GET argument lists of one batch, reused
		// from batch to batch; the two commands of a key share one boxed
		// key. (cmdable.PTTL and Get would allocate both lists and box the
		// key twice: three allocations per key fewer.)
		args := make([]any, 0, 4*s.count)
		for gi, g := range globs {
			keys, cursor, err := c.Scan(ctx, 0, g.src, int64(s.count)).Result()
			if err != nil {
				return fmt.Errorf("detectors: SCAN %s on %s: %w", g.src, addr, err)
			}
			for {
				keep, pttls, gets, batch = keep[:0], pttls[:0], gets[:0], batch[:0]
				for _, k := range keys {
					if redislock.IsCompanionKey(k) || strings.HasPrefix(k, fleet.RedisPrefix) || coveredBefore(globs[:gi], k) {
						continue
					}
					keep = append(keep, k)
				}
				pipe := c.Pipeline()
				args = args[:0]
				for _, k := range keep {
					var key any = k
					i := len(args)
					args = append(args, "pttl", key, "get", key)
					pttl := redis.NewDurationCmd(ctx, time.Millisecond, args[i:i+2:i+2]...)
					get := redis.NewStringCmd(ctx, args[i+2:i+4:i+4]...)
					_ = pipe.BatchProcess(ctx, pttl, get) // queues; errors come from Exec
					pttls, gets = append(pttls, pttl), append(gets, get)
				}
				var next *redis.ScanCmd
				if cursor != 0 {
					next = pipe.Scan(ctx, cursor, g.src, int64(s.count))
				}
				if pipe.Len() == 0 {
					break
				}
				if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) && !redirected(err) {
					return fmt.Errorf("detectors: read locks on %s: %w", addr, err)
				}
				var moved []string // keys in a slot moving away from c
				for i, k := range keep {
					if redirected(pttls[i].Err()) || redirected(gets[i].Err()) {
						moved = append(moved, k)
						continue
					}
					l, ok, err := lockOf(k, pttls[i], gets[i])
					if err != nil {
						return fmt.Errorf("detectors: read lock on %s: %w", addr, err)
					}
					if ok {
						batch = append(batch, l)
					}
				}
				if batch, err = s.rereadLocks(ctx, moved, batch); err != nil {
					return err
				}
				if len(batch) > 0 {
					mu.Lock()
					err := fn(batch)
					mu.Unlock()
					if err != nil {
						return err
					}
				}
				if next == nil {
					break
				}
				if keys, cursor, err = next.Result(); err != nil {
					return fmt.Errorf("detectors: SCAN %s on %s: %w", g.src, addr, err)
				}
			}
		}
		return nil
	})
}

// lockOf builds the Lock of key k from its PTTL and GET replies; ok is
// false when the key vanished since SCAN saw it.
func lockOf(k string, pttl *redis.DurationCmd, get *redis.StringCmd) (Lock, bool, error) {
	ttl, err := pttl.Result()
	if err != nil {
		return Lock{}, false, err
	}
	if ttl == -2 {
		return Lock{}, false, nil
	}
	l := Lock{Key: k, StoreKey: k}
	if ttl == -1 {
		l.NoTTL = true
	} else {
		l.TTL, l.TTLKnown = ttl, true
	}
	v, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return Lock{}, false, nil
	case isWrongType(err):
		l.Holder, l.Unreadable = lockvalue.Foreign(), "not a string value"
	case err != nil:
		return Lock{}, false, err
	default:
		l.Holder = redislock.DecodeValue(v)
		l.Fence = l.Holder.Fence
		if l.NoTTL {
			l.Version = lockversion.Redis(v)
		}
	}
	return l, true, nil
}

func (s *RedisStore) get(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := s.c.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("detectors: GET %q on %s: %w", key, s.addr, err)
	}
	return v, true, nil
}

// EtcdStore reads an etcd cluster.
type EtcdStore struct {
	c      *clientv3.Client
	addr   string
	prefix string
	count  int
}

// NewEtcdStore returns a Store over c. Locks are read under the lock prefix
// (WithLockPrefix, default etcdlock.DefaultPrefix).
func NewEtcdStore(c *clientv3.Client, opts ...StoreOption) (*EtcdStore, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil etcd client", ErrInvalid)
	}
	cfg, err := newStoreConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &EtcdStore{c: c, prefix: cfg.prefix, count: cfg.count, addr: cfg.addr}
	if s.addr == "" {
		eps := make([]string, 0, len(c.Endpoints()))
		for _, e := range c.Endpoints() {
			eps = append(eps, RedactURL(e))
		}
		s.addr = "etcd://" + strings.Join(eps, ",")
	}
	return s, nil
}

// Addr returns the redacted address.
func (s *EtcdStore) Addr() string { return s.addr }

// Backend returns "etcd".
func (s *EtcdStore) Backend() string { return "etcd" }

func (s *EtcdStore) cli() string {
	eps := make([]string, 0, len(s.c.Endpoints()))
	for _, e := range s.c.Endpoints() {
		eps = append(eps, RedactURL(e))
	}
	cmd := "etcdctl --endpoints=" + shellquote.Quote(strings.Join(eps, ","))
	if s.c.Username != "" {
		cmd += " --user " + shellquote.Quote(s.c.Username)
	}
	return cmd
}

// Heartbeats reads every key under fleet.EtcdPrefix.
func (s *EtcdStore) Heartbeats(ctx context.Context) ([]*fleet.Heartbeat, error) {
	hbs, _, err := s.heartbeats(ctx)
	return hbs, err
}

func (s *EtcdStore) heartbeats(ctx context.Context) ([]*fleet.Heartbeat, []unreadableBeat, error) {
	var out []*fleet.Heartbeat
	var unreadable []unreadableBeat
	err := s.pages(ctx, fleet.EtcdPrefix, func(kvs []*kvPair) error {
		for _, kv := range kvs {
			// Only a key under a lease is a heartbeat, as a publisher
			// writes every beat, whether or not its value decodes.
			if kv.lease == 0 {
				continue
			}
			if hb, err := fleet.Decode(kv.value); err == nil {
				out = append(out, hb)
			} else if inst, ok := fleet.InstanceFromKey(string(kv.key)); ok {
				unreadable = append(unreadable, parseUnreadable(inst, kv.value))
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("detectors: read heartbeats on %s: %w", s.addr, err)
	}
	sortBeats(out)
	return out, unreadable, nil
}

type kvPair struct {
	key, value        []byte
	createRev, modRev int64
	lease             int64
}

// pages ranges over prefix in pages of count keys, all at the revision of
// the first page, so a scan sees one consistent snapshot.
func (s *EtcdStore) pages(ctx context.Context, prefix string, fn func([]*kvPair) error) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(s.count))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.c.Get(ctx, from, opts...)
		if err != nil {
			return err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		page := make([]*kvPair, len(resp.Kvs))
		for i, kv := range resp.Kvs {
			page[i] = &kvPair{key: kv.Key, value: kv.Value, createRev: kv.CreateRevision, modRev: kv.ModRevision, lease: kv.Lease}
		}
		if err := fn(page); err != nil {
			return err
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// ScanLocks implements Store; it reads every holder's lease TTL.
func (s *EtcdStore) ScanLocks(ctx context.Context, _ []string, fn func(Lock) error) error {
	return s.scan(ctx, nil, func(*Lock) bool { return true }, func(ls []Lock) error {
		for _, l := range ls {
			if err := fn(l); err != nil {
				return err
			}
		}
		return nil
	})
}

// scan ranges over the lock prefix. Entries of one lock key are adjacent in
// key order (key, NUL, lease ID), so a lock is complete once the range
// moves past its key: only the current key's entries are kept across a
// page boundary. The head entry (lowest create revision) holds the lock.
// Lease TTLs cost one TimeToLive call each, so they are read only where
// needTTL says so.
func (s *EtcdStore) scan(ctx context.Context, _ []string, needTTL func(*Lock) bool, fn func([]Lock) error) error {
	var cur []*kvPair
	curKey := ""
	batch := make([]Lock, 0, s.count)
	// emit reports the lock whose entries are group, named key.
	emit := func(group []*kvPair, key string) error {
		head := group[0]
		for _, kv := range group[1:] {
			if kv.createRev < head.createRev {
				head = kv
			}
		}
		l := Lock{Key: key, StoreKey: string(head.key), Holder: etcdlock.DecodeValue(head.value),
			Fence: uint64(head.createRev), Lease: head.lease, Waiters: len(group) - 1}
		if l.NoTTL = head.lease == 0; l.NoTTL {
			l.Version = lockversion.Etcd(head.modRev)
		}
		if before, _, ok := strings.Cut(strings.TrimPrefix(l.StoreKey, s.prefix), "\x00"); ok && key == l.StoreKey && before != "" {
			l.QueueOf = before // another writer's entry under the queue of lock before
		}
		if !l.NoTTL && needTTL != nil && needTTL(&l) {
			ttl, err := s.c.TimeToLive(ctx, clientv3.LeaseID(l.Lease), clientv3.WithAttachedKeys())
			if err != nil {
				return fmt.Errorf("detectors: lease TTL on %s: %w", s.addr, err)
			}
			if ttl.TTL < 0 { // expired since the range: the entry is gone
				return nil
			}
			l.TTL, l.TTLKnown = time.Duration(ttl.TTL)*time.Second, true
			l.GrantedTTL = time.Duration(ttl.GrantedTTL) * time.Second
			l.LeaseKeys = len(ttl.Keys)
		}
		batch = append(batch, l)
		if len(batch) >= s.count {
			err := fn(batch)
			batch = batch[:0]
			return err
		}
		return nil
	}
	flush := func() error {
		if len(cur) == 0 {
			return nil
		}
		err := emit(cur, curKey)
		cur = cur[:0]
		return err
	}
	err := s.pages(ctx, s.prefix, func(kvs []*kvPair) error {
		for _, kv := range kvs {
			key, _, ok := etcdlock.ParseQueueKey(s.prefix, string(kv.key))
			if !ok {
				// Not etcdlock's layout (another writer's key under the
				// prefix): a lock of its own, named by its etcd key. It
				// may sort between two entries of one lock ("<key>\x00"
				// and a longer suffix), so the lock's group goes on.
				if err := emit([]*kvPair{kv}, string(kv.key)); err != nil {
					return err
				}
				continue
			}
			if key != curKey {
				if err := flush(); err != nil {
					return err
				}
				curKey = key
			}
			cur = append(cur, kv)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("detectors: scan locks on %s: %w", s.addr, err)
	}
	if err := flush(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return fn(batch)
	}
	return nil
}

func (s *EtcdStore) get(ctx context.Context, key string) ([]byte, bool, error) {
	resp, err := s.c.Get(ctx, key)
	if err != nil {
		return nil, false, fmt.Errorf("detectors: get %q on %s: %w", key, s.addr, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	return resp.Kvs[0].Value, true, nil
}
