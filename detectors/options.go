package detectors

import (
	"fmt"
	"slices"
	"time"

	"github.com/lockgov/lockgov/policy"
)

// Option configures a detector. An option that does not apply to the
// detector it is given to is an error from the constructor.
type Option interface{ apply(*config) }

type option struct {
	name string
	f    func(*config)
}

func (o option) apply(c *config) {
	c.used = append(c.used, o.name)
	o.f(c)
}

// Range is a service's WorkerID range, inclusive.
type Range struct{ Lo, Hi int64 }

type config struct {
	used        []string
	policy      *policy.Policy
	patterns    []string
	beats       []Store
	maxFindings int
	retention   time.Duration
	ranges      map[string]Range
	maxWorkerID int64
	widPrefix   string
	now         func() time.Time
}

// Defaults.
const (
	DefaultMaxFindings = 1000
	DefaultMemory      = 24 * time.Hour
	DefaultMaxWorkerID = 1023 // the default snowflake layout's 10 bits
)

// WithPolicy sets the policy whose patterns, TTL bounds, max hold and skew
// tiers the detectors apply (default policy.Default()).
func WithPolicy(p *policy.Policy) Option {
	return option{"WithPolicy", func(c *config) { c.policy = p }}
}

// WithPatterns sets the Redis SCAN globs of lock keys (default: "lock:*"
// plus each policy pattern's glob).
func WithPatterns(globs ...string) Option {
	return option{"WithPatterns", func(c *config) { c.patterns = append(c.patterns, globs...) }}
}

// WithHeartbeatsFrom adds stores whose heartbeats count too, for processes
// that publish into another store than the one read (a lock on Redis held
// by a process whose heartbeat is on etcd is still live).
func WithHeartbeatsFrom(stores ...Store) Option {
	return option{"WithHeartbeatsFrom", func(c *config) { c.beats = append(c.beats, stores...) }}
}

// WithMaxFindings caps the findings of each kind one Detect returns
// (default 1000); the rest are summed up in one finding of that kind
// without a key.
func WithMaxFindings(n int) Option {
	return option{"WithMaxFindings", func(c *config) { c.maxFindings = n }}
}

// WithMemory sets how long a detector remembers an instance it saw (to
// report its locks as holder_dead once its heartbeats are gone) or a lock
// order it saw (default 24h).
func WithMemory(d time.Duration) Option {
	return option{"WithMemory", func(c *config) { c.retention = d }}
}

// WithServiceRange declares the WorkerIDs service may use, lo..hi
// inclusive. The policy file has no WorkerID ranges: the agent passes its
// config's ranges here.
func WithServiceRange(service string, lo, hi int64) Option {
	return option{"WithServiceRange", func(c *config) {
		if c.ranges == nil {
			c.ranges = map[string]Range{}
		}
		c.ranges[service] = Range{lo, hi}
	}}
}

// WithMaxWorkerID sets the largest WorkerID of the layout (default 1023).
func WithMaxWorkerID(n int64) Option {
	return option{"WithMaxWorkerID", func(c *config) { c.maxWorkerID = n }}
}

// WithWorkerIDPrefix sets the workerid registry's key prefix, used when a
// heartbeat does not name its slot key (default workerid.DefaultKeyPrefix).
func WithWorkerIDPrefix(p string) Option {
	return option{"WithWorkerIDPrefix", func(c *config) { c.widPrefix = p }}
}

// WithNow sets the clock findings' ages are measured on (default time.Now).
func WithNow(now func() time.Time) Option {
	return option{"WithNow", func(c *config) { c.now = now }}
}

func newConfig(detector string, opts []Option, allowed ...string) (config, error) {
	c := config{maxFindings: DefaultMaxFindings, retention: DefaultMemory, maxWorkerID: DefaultMaxWorkerID,
		widPrefix: "lockgov:workerid:", now: time.Now}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	allowed = append(allowed, "WithHeartbeatsFrom", "WithMaxFindings", "WithNow")
	for _, u := range c.used {
		if !slices.Contains(allowed, u) {
			return c, fmt.Errorf("%w: %s does not apply to the %s detector", ErrInvalid, u, detector)
		}
	}
	if c.policy == nil {
		c.policy = policy.Default()
	} else if err := c.policy.Validate(); err != nil {
		return c, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch {
	case c.maxFindings < 1:
		return c, fmt.Errorf("%w: max findings %d, want >= 1", ErrInvalid, c.maxFindings)
	case c.retention <= 0:
		return c, fmt.Errorf("%w: memory %s, want > 0", ErrInvalid, c.retention)
	case c.now == nil:
		return c, fmt.Errorf("%w: nil clock", ErrInvalid)
	case c.widPrefix == "":
		return c, fmt.Errorf("%w: empty WorkerID key prefix", ErrInvalid)
	case c.maxWorkerID < 0:
		return c, fmt.Errorf("%w: max WorkerID %d, want >= 0", ErrInvalid, c.maxWorkerID)
	}
	for _, s := range c.beats {
		if s == nil {
			return c, fmt.Errorf("%w: nil heartbeat store", ErrInvalid)
		}
	}
	for svc, r := range c.ranges {
		if r.Lo < 0 || r.Lo > r.Hi || r.Hi > c.maxWorkerID {
			return c, fmt.Errorf("%w: service %q range [%d, %d] is not within [0, %d]", ErrInvalid, svc, r.Lo, r.Hi, c.maxWorkerID)
		}
	}
	return c, nil
}

// capped keeps at most max findings per kind, the first by SortFindings
// order, and counts the rest, so memory does not grow with the number of
// bad locks in a store.
type capped struct {
	max     int
	byKey   bool // one finding per kind, store and key
	byKind  map[string][]Finding
	dropped map[string]int
}

func newCapped(max int) *capped {
	return &capped{max: max, byKind: map[string][]Finding{}, dropped: map[string]int{}}
}

// newCappedByKey is newCapped keeping one finding per kind, store and key:
// a SCAN may return a key twice (during a rehash), which must not make
// two findings. It is for detectors that make at most one finding of a
// kind per key (Locks); a duplicate past the cap is counted in the
// summary again, as nothing of a dropped finding is kept.
func newCappedByKey(max int) *capped {
	c := newCapped(max)
	c.byKey = true
	return c
}

func (c *capped) add(f Finding) {
	fs := append(c.byKind[f.Kind], f)
	if len(fs) >= 2*c.max {
		fs = c.sorted(fs)
		if len(fs) > c.max {
			c.dropped[f.Kind] += len(fs) - c.max
			clear(fs[c.max:])
			fs = fs[:c.max]
		}
	}
	c.byKind[f.Kind] = fs
}

// sorted sorts fs and, when byKey, keeps the first of each store and key.
func (c *capped) sorted(fs []Finding) []Finding {
	SortFindings(fs)
	if !c.byKey {
		return fs
	}
	return slices.CompactFunc(fs, func(a, b Finding) bool { return a.Store == b.Store && a.Key == b.Key })
}

func (c *capped) result(detector, store string) []Finding {
	var out []Finding
	for kind, fs := range c.byKind {
		fs = c.sorted(fs)
		if len(fs) > c.max {
			c.dropped[kind] += len(fs) - c.max
			fs = fs[:c.max]
		}
		out = append(out, fs...)
		if n := c.dropped[kind]; n > 0 {
			out = append(out, Finding{Detector: detector, Kind: kind, Severity: fs[0].Severity, Store: store,
				Detail: fmt.Sprintf("%d more %s findings not listed (the first %d by key are)", n, kind, c.max),
				Action: "# fix the listed ones first; list the rest with `lockgov locks ls`",
			})
		}
	}
	SortFindings(out)
	return out
}
