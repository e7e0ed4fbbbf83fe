package workerid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/internal/replicaack"
	"github.com/lockgov/lockgov/snowflake"
)

// Defaults.
const (
	DefaultTTL          = 10 * time.Second
	DefaultKeyPrefix    = "lockgov:workerid:"
	DefaultHighWaterTTL = 24 * time.Hour
)

// cleanupTimeout bounds a best-effort cleanup after a failed call, such as releasing what
// a claim whose reply was lost may have taken.
const cleanupTimeout = time.Second

// processStart is when this process loaded the package: the claim's StartedAt.
var processStart = time.Now().UTC()

// backend is one store's owner-checked operations on a slot.
type backend interface {
	// claim takes the slot if it is free or already held by token. It returns the
	// persisted high-water mark (floor) and the new reservation it persisted, both Unix ms.
	claim(ctx context.Context, s *leaseState) (floor, reserve int64, err error)
	// renew extends a held slot. status is renewed, missing (slot gone, may be
	// re-claimed) or stolen (another owner holds it). floor is the floor the slot records
	// for s's token (0 where the store records none): above s.floor only when a re-claim
	// of s took the slot but its reply was lost.
	renew(ctx context.Context, s *leaseState) (st renewStatus, reserve, floor int64, ttl time.Duration, err error)
	// release deletes the slot if s still holds it and lowers the high-water mark to
	// lastUsed (Unix ms) when that is known (non-zero).
	release(ctx context.Context, s *leaseState, lastUsed int64) error
	// abandon undoes, owner-checked, what a failed claim of s may have taken. reclaim is
	// true for a live lease's claim of its vanished slot (renewOnce), false for a Claim's,
	// under whose token nothing was ever issued.
	abandon(ctx context.Context, s *leaseState, reclaim bool) error
	name() string
}

type renewStatus int

const (
	renewed renewStatus = iota
	missing
	stolen
)

// Registry hands out WorkerIDs as leases from Redis or etcd.
type Registry struct {
	b   backend
	cfg config

	mu      sync.Mutex
	orphans []*leaseState // failed claims not yet abandoned: see claim
}

// maxOrphans bounds Registry.orphans; the oldest go first, their slots expire first.
const maxOrphans = 16

type config struct {
	ttl, margin  time.Duration
	maxPeerTTL   time.Duration // WithMaxPeerTTL
	hwTTL        time.Duration
	prefix       string
	layout       snowflake.Layout // with epoch, the ID space: leases bind only its generators
	epoch        time.Time
	ranges       map[string][2]int64
	nextFree     bool
	hostname     string
	podIP        string
	renewTimeout time.Duration
	clock        snowflake.Clock
	logger       *slog.Logger
	onLeaked     func(Claim)
	noBeat       bool            // WithoutHeartbeat
	beatOpts     []fleet.Option  // WithHeartbeat
	acks         replicaack.Acks // WithReplicaAcks (Redis only)
	acksSet      bool            // WithReplicaAcks given, whatever its values
}

// longestTTL is the longest lease TTL of any Registry on the store and key prefix, as far
// as this one knows: its own, or WithMaxPeerTTL's if longer.
func (c *config) longestTTL() time.Duration { return max(c.ttl, c.maxPeerTTL) }

// wall reads the wall clock reservations and claim times are taken from.
func (c *config) wall() time.Time { return c.clock.Wall() }

// space is the Registry's ID space as the slot's space key records it: the layout and the
// epoch in Unix ms, "41/10/12@1704067200000" by default. Layout.String names the three
// widths, which fix Bits too (they must sum to it).
func (c *config) space() string {
	return c.layout.String() + "@" + strconv.FormatInt(c.epoch.UnixMilli(), 10)
}

// Option configures a Registry.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithTTL sets the lease TTL (default 10s). Leases renew every TTL/3.
func WithTTL(d time.Duration) Option { return optionFunc(func(c *config) { c.ttl = d }) }

// WithMargin sets how long before the lease's earliest possible expiry the generator stops
// (default TTL/10): room for clock-rate drift between this host and the store.
func WithMargin(d time.Duration) Option { return optionFunc(func(c *config) { c.margin = d }) }

// WithServiceRange reserves WorkerIDs lo..hi (inclusive) for service. A service without a
// range may use every WorkerID of the layout.
func WithServiceRange(service string, lo, hi int64) Option {
	return optionFunc(func(c *config) {
		if c.ranges == nil {
			c.ranges = map[string][2]int64{}
		}
		c.ranges[service] = [2]int64{lo, hi}
	})
}

// WithLayout sets the snowflake layout whose WorkerIDs are handed out (default
// snowflake.DefaultLayout, 41/10/12). With the epoch (WithEpoch) it is the Registry's ID
// space: its leases bind only generators of this layout (snowflake.New refuses another
// with snowflake.ErrInvalid), whether or not the option was given. Every Registry and
// generator on a key prefix must use the same layout and epoch.
func WithLayout(l snowflake.Layout) Option {
	return optionFunc(func(c *config) { c.layout = l })
}

// WithEpoch sets the snowflake epoch of the IDs issued under the Registry's WorkerIDs
// (default snowflake.DefaultEpoch, 2024-01-01T00:00:00Z): give it the epoch the generators
// are built with (snowflake.WithEpoch). With the layout (WithLayout) it is the Registry's
// ID space: its leases bind only generators of this epoch (snowflake.New refuses another
// with snowflake.ErrInvalid), whether or not the option was given. The epoch is checked
// as snowflake.New checks it (snowflake.Layout.ValidateEpoch): not zero, not in the
// future, not before 1970, a whole millisecond, and the layout's lifetime from it not
// over.
func WithEpoch(t time.Time) Option { return optionFunc(func(c *config) { c.epoch = t }) }

// WithNextFree makes Claim take the next free slot in the service's range when the
// preferred slot is held, instead of returning *CollisionError. A slot that records
// another epoch of the Registry's layout is passed by as a held one; one that records
// another layout fails the Claim with *SpaceMismatchError (see the package doc, ID space).
func WithNextFree() Option { return optionFunc(func(c *config) { c.nextFree = true }) }

// WithKeyPrefix sets the key prefix (default "lockgov:workerid:"). Registries that hand out
// WorkerIDs for the same ID space must share it; slots are keyed by WorkerID, not service,
// so that two services with overlapping ranges collide visibly.
func WithKeyPrefix(p string) Option { return optionFunc(func(c *config) { c.prefix = p }) }

// WithIdentity overrides the hostname (default os.Hostname; its -N suffix is the preferred
// slot) and pod IP (default $POD_IP) stored in the claim.
func WithIdentity(hostname, podIP string) Option {
	return optionFunc(func(c *config) { c.hostname, c.podIP = hostname, podIP })
}

// WithClock replaces the wall clock that claim times and high-water reservations are read
// from (default the system clock), for tests. A lease's deadline is always measured on the
// real monotonic clock.
func WithClock(clk snowflake.Clock) Option {
	return optionFunc(func(c *config) { c.clock = clk })
}

// WithLogger sets the logger for leases garbage-collected while held (default
// slog.Default()). Owner tokens are never logged.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithLeakedHook sets a func called once for every Lease garbage-collected while held
// (never released), before its slot is released: count it in a metric. It runs on the
// runtime's cleanup goroutine and must be fast.
func WithLeakedHook(f func(Claim)) Option { return optionFunc(func(c *config) { c.onLeaked = f }) }

// WithHighWaterTTL sets how long Redis keeps a slot's high-water mark after its last
// renewal (default 24h). etcd keeps it without a lease.
func WithHighWaterTTL(d time.Duration) Option { return optionFunc(func(c *config) { c.hwTTL = d }) }

// WithMaxPeerTTL declares the longest lease TTL (WithTTL) of any Registry on the same
// store and key prefix, when some use a longer TTL than this one: while a rolling deploy
// changes the TTL, say. On Redis, a claim that finds a slot's high-water mark missing (the
// store lost it with the slot, as on a restart without persistence) takes the server's
// now plus the longer of its own TTL and d as its floor, so that it starts only after a
// holder with the longer TTL, whose lease is valid on its side for up to that TTL, has
// stopped. Such a claim waits that long. The default, 0, is this Registry's own TTL. etcd
// does not lose the mark (a missing mark means never used), so there it does not change
// the floor; on both stores Claim waits for a floor up to two of these TTLs ahead. d must
// not exceed the high-water TTL (WithHighWaterTTL), which bounds every peer's TTL.
func WithMaxPeerTTL(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxPeerTTL = d })
}

func newConfig(opts []Option) (config, error) {
	c := config{ttl: DefaultTTL, hwTTL: DefaultHighWaterTTL, prefix: DefaultKeyPrefix, layout: snowflake.DefaultLayout, epoch: snowflake.DefaultEpoch}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.clock == nil {
		c.clock = snowflake.SystemClock{}
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.margin == 0 {
		c.margin = c.ttl / 10
	}
	switch {
	case c.ttl < 300*time.Millisecond:
		return c, fmt.Errorf("%w: TTL %s, want >= 300ms", ErrInvalid, c.ttl)
	case c.margin < 0 || c.margin >= c.ttl/2:
		return c, fmt.Errorf("%w: margin %s, want 0 <= margin < TTL/2", ErrInvalid, c.margin)
	case c.maxPeerTTL < 0:
		return c, fmt.Errorf("%w: max peer TTL %s, want >= 0 (0: this registry's own TTL)", ErrInvalid, c.maxPeerTTL)
	case c.hwTTL < c.ttl:
		return c, fmt.Errorf("%w: high-water TTL %s shorter than the lease TTL %s", ErrInvalid, c.hwTTL, c.ttl)
	case c.hwTTL < c.maxPeerTTL:
		// A peer's TTL is bounded by the high-water TTL as this one's is (the peers share
		// the marks); a longer one is a mistake, and would put a lost mark's floor that
		// far ahead, for every later holder of the WorkerID.
		return c, fmt.Errorf("%w: max peer TTL %s longer than the high-water TTL %s", ErrInvalid, c.maxPeerTTL, c.hwTTL)
	case c.prefix == "":
		return c, fmt.Errorf("%w: empty key prefix", ErrInvalid)
	}
	if err := c.layout.Validate(); err != nil {
		return c, err
	}
	if err := c.layout.ValidateEpoch(c.epoch, c.wall()); err != nil {
		return c, fmt.Errorf("%w: WithEpoch: %w", ErrInvalid, err)
	}
	for s, r := range c.ranges {
		if r[0] < 0 || r[0] > r[1] || r[1] > c.layout.MaxWorker() {
			return c, fmt.Errorf("%w: service %q range [%d, %d] is not within [0, %d]", ErrInvalid, s, r[0], r[1], c.layout.MaxWorker())
		}
	}
	if c.hostname == "" {
		c.hostname, _ = os.Hostname()
	}
	if c.podIP == "" {
		c.podIP = os.Getenv("POD_IP")
	}
	c.renewTimeout = c.ttl / 3
	if err := c.checkAcks(); err != nil {
		return c, err
	}
	return c, checkBeatOptions(&c)
}

// ordinal is a StatefulSet pod's index: the hostname's -N suffix.
var ordinal = regexp.MustCompile(`-(\d+)$`)

// Range returns the WorkerIDs service may claim.
func (r *Registry) Range(service string) (lo, hi int64) {
	if rg, ok := r.cfg.ranges[service]; ok {
		return rg[0], rg[1]
	}
	return 0, r.cfg.layout.MaxWorker()
}

// Preferred returns the slot this host prefers for service: the range's start plus the
// StatefulSet ordinal. ok is false when the hostname has no ordinal.
func (r *Registry) Preferred(service string) (slot int64, ok bool, err error) {
	m := ordinal.FindStringSubmatch(r.cfg.hostname)
	if m == nil {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	lo, hi := r.Range(service)
	if err != nil || lo+n > hi {
		return 0, true, fmt.Errorf("%w: service %q: ordinal %s of host %q is outside its range [%d, %d]", ErrInvalid, service, m[1], r.cfg.hostname, lo, hi)
	}
	return lo + n, true, nil
}

// Claim leases a WorkerID for service: the preferred slot (see Preferred) or, for a host
// without an ordinal, the first free slot in the service's range. A preferred slot held by
// another live owner is a *CollisionError unless the Registry was built WithNextFree. The
// lease renews itself until Release.
//
// Claim returns once a bound generator can issue at once: when the slot's high-water mark
// is ahead of the local clock by up to two TTLs (the longer of WithTTL and WithMaxPeerTTL)
// (a crashed holder's reservation, or on Redis a mark that is unknown because the store
// lost it), it waits for the clock to pass it, renewing meanwhile, and fails without
// waiting if ctx's deadline comes first. A mark further ahead means this host's clock is
// behind an earlier holder's: Claim returns and the generator refuses with
// *snowflake.ClockBackwardsError until the clock catches up.
//
// A slot that records another ID space (layout and epoch) than the Registry's is refused
// with *SpaceMismatchError, held or free; when Claim walks the range (WithNextFree, or a
// host without an ordinal) it passes by a slot of another epoch of its layout, and fails
// on one of another layout. A slot that records no space is taken and records the
// Registry's. See the package doc, ID space.
//
// A Claim that fails after the store may have given it the slot (a reply lost or late, ctx
// ended, or waiting for the floor) releases the slot by its own token, so that a retry does
// not collide with it; if that release fails too, the Registry's next Claim sends it again
// first. So does a claim fewer replicas acknowledged than WithReplicaAcks asks for, which
// returns an error holding a *NotReplicatedError.
func (r *Registry) Claim(ctx context.Context, service string) (*Lease, error) {
	if service == "" {
		return nil, fmt.Errorf("%w: empty service name", ErrInvalid)
	}
	lo, hi := r.Range(service)
	pref, hasPref, err := r.Preferred(service)
	if err != nil && !r.cfg.nextFree {
		return nil, err
	}
	var order []int64
	all := func(from int64) { // every slot in the range, from `from` on, wrapping around
		for i := int64(0); i <= hi-lo; i++ {
			if s := lo + (from-lo+i)%(hi-lo+1); len(order) == 0 || s != order[0] {
				order = append(order, s)
			}
		}
	}
	preferredOnly := false
	switch {
	case hasPref && err == nil:
		order = append(order, pref)
		if r.cfg.nextFree {
			all(pref)
		} else {
			preferredOnly = true
		}
	case hasPref && !r.cfg.nextFree:
		return nil, err
	default: // no ordinal, or one outside the range with WithNextFree
		all(lo)
	}
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	r.abandonOrphans(ctx)
	var held, other []error // slots passed by: held by another owner, or of another ID space
	for _, slot := range order {
		ls := r.newLease(service, slot, token)
		err := r.claimSlot(ctx, ls)
		if err == nil {
			l := ls.start()
			ls.attachFleet()
			if err := r.awaitFloor(ctx, ls); err != nil {
				// A fresh context: ctx is why we give up. The release keeps the mark.
				rctx, cancel := context.WithTimeout(context.Background(), r.cfg.renewTimeout)
				rerr := l.Release(rctx)
				cancel()
				if rerr != nil {
					// Nothing was issued under it: the next Claim abandons it, as any
					// failed claim.
					r.orphan(ls)
				}
				return nil, errors.Join(err, rerr)
			}
			return l, nil
		}
		if sm, ok := errors.AsType[*SpaceMismatchError](err); ok {
			// A slot of another epoch of this layout is passed by, like a held one: its
			// IDs and this Registry's never meet on different WorkerIDs (the worker
			// bits differ). IDs of two layouts do meet across WorkerIDs, so a slot of
			// another layout fails the Claim: no slot of the range is safe.
			if preferredOnly || !sm.sameLayout() {
				return nil, err
			}
			other = append(other, err)
			continue
		}
		if !errors.Is(err, ErrCollision) || preferredOnly {
			return nil, err
		}
		held = append(held, err)
	}
	// The first of each kind says why: held slots free up, slots of another space do not.
	var why []error
	for _, errs := range [][]error{held, other} {
		if len(errs) > 0 {
			why = append(why, errs[0])
		}
	}
	return nil, fmt.Errorf("%w: service %q, range [%d, %d] (%s): %d held, %d of another ID space: %w",
		ErrNoFreeSlot, service, lo, hi, r.b.name(), len(held), len(other), errors.Join(why...))
}

func (r *Registry) claimSlot(ctx context.Context, s *leaseState) error {
	sent := time.Now()
	floor, reserve, abandoned, err := r.claim(ctx, s, false)
	if err != nil {
		if !abandoned {
			r.orphan(s)
		}
		return err
	}
	s.floor = floor
	s.confirm(sent, r.cfg.ttl, reserve)
	return nil
}

// claim runs the store's claim of s. A claim that fails other than on finding another
// holder in the slot may have taken the slot all the same: its reply was lost or came
// after ctx ended, or on etcd ctx ended after the slot's transaction and before the
// high-water raise. The slot is then held under s's token, which nobody renews or
// releases, and this process's next Claim (a new token) would collide with it for a TTL.
// So claim abandons it, owner-checked, on a fresh context (ctx may be why the claim
// failed), and reports whether that got through. reclaim: see backend.abandon.
func (r *Registry) claim(ctx context.Context, s *leaseState, reclaim bool) (floor, reserve int64, abandoned bool, err error) {
	floor, reserve, err = r.b.claim(ctx, s)
	if err == nil {
		return floor, reserve, false, nil
	}
	if _, held := errors.AsType[*CollisionError](err); held {
		return 0, 0, true, err // the slot is another's: nothing was taken
	}
	if _, other := errors.AsType[*SpaceMismatchError](err); other {
		return 0, 0, true, err // refused before anything was written
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return 0, 0, r.b.abandon(actx, s, reclaim) == nil, err
}

// orphan keeps a failed claim whose abandon failed too, for the next Claim to abandon.
func (r *Registry) orphan(s *leaseState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.orphans = append(r.orphans, s)
	if n := len(r.orphans); n > maxOrphans {
		r.orphans = slices.Delete(r.orphans, 0, n-maxOrphans)
	}
}

// abandonOrphans abandons the failed claims that orphan kept, before a Claim: one of them
// may hold the slot this Claim wants. Those it cannot reach the store for are kept.
func (r *Registry) abandonOrphans(ctx context.Context) {
	r.mu.Lock()
	orphans := r.orphans
	r.orphans = nil
	r.mu.Unlock()
	for _, s := range orphans {
		actx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		err := r.b.abandon(actx, s, false)
		cancel()
		if err != nil {
			r.orphan(s)
		}
	}
}

// awaitFloor returns once the wall clock has passed the lease's high-water floor, when
// that is at most two TTLs away (see Claim; the longest TTL, with WithMaxPeerTTL). The
// floor can rise meanwhile: a renewal that finds the slot gone claims it again.
func (r *Registry) awaitFloor(ctx context.Context, s *leaseState) error {
	for {
		st := s.State()
		if st.Err != nil {
			return fmt.Errorf("workerid: worker id %d: %w", s.claim.WorkerID, st.Err)
		}
		d := time.UnixMilli(st.FloorUnixMilli + 1).Sub(r.cfg.wall())
		if longest := r.cfg.longestTTL(); d <= 0 || d-longest > longest { // d > 2*longest, without overflow
			return nil
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			return fmt.Errorf("workerid: worker id %d (%s): IDs can start only in %s, after the context's deadline (the slot's high-water mark is a previous holder's reservation, or unknown after the store lost it): %w",
				s.claim.WorkerID, r.b.name(), d.Round(time.Millisecond), context.DeadlineExceeded)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("workerid: worker id %d: waiting for the slot's high-water mark: %w", s.claim.WorkerID, context.Cause(ctx))
		case <-s.done:
			t.Stop()
			if st := s.State(); st.Err == nil {
				return fmt.Errorf("workerid: worker id %d: lease ended while waiting for the high-water mark", s.claim.WorkerID)
			}
		case <-t.C:
		}
	}
}

func newToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("workerid: owner token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func (r *Registry) newLease(service string, slot int64, token string) *leaseState {
	claim := Claim{
		Service:   service,
		WorkerID:  slot,
		PodIP:     r.cfg.podIP,
		Hostname:  r.cfg.hostname,
		PID:       os.Getpid(),
		StartedAt: processStart,
		ClaimedAt: r.cfg.wall().UTC(),
	}
	value, _ := json.Marshal(stored{Owner: token, Claim: claim}) // plain strings and numbers
	return &leaseState{
		reg:      r,
		claim:    claim,
		claimed:  time.Now(),
		token:    token,
		value:    value,
		key:      SlotKey(r.cfg.prefix, slot),
		hwKey:    SlotKey(r.cfg.prefix, slot) + highWaterSuffix,
		spaceKey: SlotKey(r.cfg.prefix, slot) + spaceSuffix,
		done:     make(chan struct{}),
	}
}
