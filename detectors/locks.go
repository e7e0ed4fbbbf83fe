package detectors

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgov/lockgov/internal/shellquote"
	"github.com/lockgov/lockgov/policy"
)

// Locks finds leaked locks in one store: immortal, ttl_above_max,
// held_too_long and holder_dead. It is safe for concurrent use (calls to
// Detect are serialised).
type Locks struct {
	store Store
	beats []Store
	cfg   config
	m     *policy.Matcher
	globs []string
	mu    sync.Mutex
	seen  seenSet
	locks atomic.Uint64
}

// NewLocks returns the leaked-lock detector of s. Options: WithPolicy,
// WithPatterns, WithHeartbeatsFrom, WithMemory, WithMaxFindings, WithNow.
func NewLocks(s Store, opts ...Option) (*Locks, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	cfg, err := newConfig(DetectorLocks, opts, "WithPolicy", "WithPatterns", "WithMemory")
	if err != nil {
		return nil, err
	}
	d := &Locks{store: s, beats: append([]Store{s}, cfg.beats...), cfg: cfg, m: policy.NewMatcher(cfg.policy),
		seen: seenSet{retention: cfg.retention}}
	d.globs = cfg.patterns
	if len(d.globs) == 0 {
		d.globs = []string{DefaultLockPattern}
		for _, r := range cfg.policy.Patterns {
			d.globs = append(d.globs, GlobFromPattern(r.Pattern))
		}
	}
	return d, nil
}

// Name returns "locks".
func (d *Locks) Name() string { return DetectorLocks }

// Store returns the redacted address of the store whose locks it reads
// (the Store of its findings).
func (d *Locks) Store() string { return d.store.Addr() }

// Scanned returns the number of locks the last Detect read.
func (d *Locks) Scanned() uint64 { return d.locks.Load() }

// NewTerm tells d that its next run does not follow its last: the agent
// calls it when it starts leading (another agent may have watched
// meanwhile, or none did). It forgets which stores were read whole while
// each process was seen, so that a process that moved its heartbeat into a
// store unread now is undecided, not holder_dead.
func (d *Locks) NewTerm() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen.forgetChecked()
}

// Detect reads the heartbeats, then every lock, a batch at a time. When
// the heartbeats of another store than its own cannot be read, it still
// reads every lock and returns its findings with a *PartialError: a lock
// whose holder may publish into an unread store is not called holder_dead
// (the error's scopes name it), every other finding stands.
func (d *Locks) Detect(ctx context.Context) ([]Finding, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fr, err := readFleet(ctx, d.beats, true)
	if err == nil {
		err = recheckFleet(ctx, d.beats, &d.seen, fr, true)
	}
	if err != nil {
		d.seen.forgetChecked() // the next read does not follow this one
		return nil, err
	}
	now := d.cfg.now()
	d.seen.record(fr.beats, fr.unreadable, fr.read, now)
	live := newLiveSet(fr.beats, fr.unreadable, &d.seen)
	out := newCappedByKey(d.cfg.maxFindings) // SCAN may return a key twice
	var n uint64
	addr := d.store.Addr()
	var undecided []Scope // locks whose holder may publish into an unread store
	needTTL := func(l *Lock) bool {
		_, rule := d.m.Match(l.Key)
		h := &l.Holder
		return h.Foreign || h.TTL <= 0 || h.TTL > rule.MaxTTL || d.heldTooLong(l, rule, now) ||
			d.seen.holderState(h, live, fr.failed) == "gone"
	}
	err = d.store.scan(ctx, d.globs, needTTL, func(ls []Lock) error {
		for i := range ls {
			n++
			if d.check(&ls[i], live, fr.failed, now, out) != "unknown" {
				continue
			}
			switch {
			case len(undecided) > 0 && undecided[0].Key == "": // already any key
			case len(undecided) < d.cfg.maxFindings:
				undecided = append(undecided, Scope{Kind: KindHolderDead, Store: addr, Key: ls[i].Key})
			default:
				undecided = []Scope{{Kind: KindHolderDead, Store: addr}} // any key: memory stays bounded
			}
		}
		return nil
	})
	d.locks.Store(n)
	if err != nil {
		return nil, err
	}
	return out.result(DetectorLocks, addr), fr.partial(undecided...)
}

func (d *Locks) heldTooLong(l *Lock, rule *policy.Rule, now time.Time) bool {
	return rule.MaxHold > 0 && !l.Holder.AcquiredAt.IsZero() && now.Sub(l.Holder.AcquiredAt) > rule.MaxHold
}

// check classifies one lock. A lock with a TTL within the policy, held
// within max hold by a process that is live or was never seen publishing
// heartbeats, is never a finding.
// noTTL is a finding's TTL for a lock without one (Finding.TTL).
const noTTL = -time.Second

// It returns the holder's state (seenSet.holderState).
func (d *Locks) check(l *Lock, live liveSet, failed map[string]error, now time.Time, out *capped) string {
	label, rule := d.m.Match(l.Key)
	h := &l.Holder
	state := d.seen.holderState(h, live, failed)
	immortal := l.NoTTL
	above := false
	redis := d.store.Backend() == "redis"
	if l.TTLKnown && rule.MaxTTL > 0 {
		above = l.TTL > rule.MaxTTL
		if !redis {
			// etcd grants whole seconds (and at least its minimum TTL): a
			// lockgov holder that asked for a TTL within bounds is fine.
			above = l.GrantedTTL > roundUpSecond(rule.MaxTTL) && (h.Foreign || h.TTL <= 0 || h.TTL > rule.MaxTTL)
		}
	}
	tooLong := d.heldTooLong(l, rule, now)
	if !immortal && !above && !tooLong && state != "gone" {
		return state // the common case: a healthy lock costs no formatting
	}
	holder := HolderFromValue(*h)
	holder.Heartbeat = state
	var age time.Duration
	if !h.AcquiredAt.IsZero() {
		age = max(now.Sub(h.AcquiredAt), 0)
	}
	ttl := l.TTL
	if immortal {
		ttl = noTTL
	}
	f := func(kind, sev, detail, action string) {
		out.add(Finding{Detector: DetectorLocks, Kind: kind, Severity: sev, Store: d.store.Addr(), Key: l.Key,
			KeyPattern: label, Holder: holder, Age: age, TTL: ttl, Detail: detail, Action: action, Version: l.Version})
	}
	who, whoQuoted := holderString(*h), holderQuoted(*h)
	if l.Unreadable != "" {
		who += " (" + l.Unreadable + ")"
		whoQuoted += " (" + l.Unreadable + ")"
	}
	if l.QueueOf != "" {
		who += fmt.Sprintf("; another writer's entry under the queue of lock %s: etcdlock counts it as a holder of %s, so an Acquire of %s queued after it waits and FailFast and Retry fail until it is deleted",
			l.QueueOf, l.QueueOf, l.QueueOf)
	}
	cli := d.store.cli()
	if immortal {
		var action string
		if redis && strings.Contains(l.StoreKey, "\x00") {
			action = "# give it the policy TTL (" + rule.TTL.String() + ") or free it through " + redisNULKey
		} else if redis {
			action = fmt.Sprintf("%s PEXPIRE %s %d   # puts the policy TTL (%s) back: the lock frees then unless a live holder renews it; DEL frees it now",
				cli, shellquote.Quote(l.StoreKey), rule.TTL.Milliseconds(), rule.TTL)
		} else {
			action = fmt.Sprintf("%s   # then, once its holder is confirmed gone: %s", etcdGet(d.store, l), freeCommand(d.store, l))
		}
		f(KindImmortal, SeverityCritical,
			fmt.Sprintf("lock has no TTL and will never expire; held by %s", who), action)
	}
	if above {
		var action string
		if redis && strings.Contains(l.StoreKey, "\x00") {
			action = fmt.Sprintf("# make the caller ask for a TTL <= %s; to cap it now, use %s", rule.MaxTTL, redisNULKey)
		} else if redis {
			action = fmt.Sprintf("%s PEXPIRE %s %d   # caps it at max_ttl now; then make the caller ask for a TTL <= %s",
				cli, shellquote.Quote(l.StoreKey), rule.MaxTTL.Milliseconds(), rule.MaxTTL)
		} else {
			action = fmt.Sprintf("%s   # make the caller ask for a TTL <= %s; to free the lock now: %s",
				etcdGet(d.store, l), rule.MaxTTL, freeCommand(d.store, l))
		}
		ttl := l.TTL
		if !redis {
			ttl = l.GrantedTTL
		}
		f(KindTTLAboveMax, SeverityWarning,
			fmt.Sprintf("TTL %s is above the policy's max_ttl %s for %s; held by %s", ttl, rule.MaxTTL, label, who), action)
	}
	if tooLong {
		f(KindHeldTooLong, SeverityWarning,
			fmt.Sprintf("held for %s, longer than the policy's max_hold %s for %s, by %s", age.Round(time.Millisecond), rule.MaxHold, label, who),
			fmt.Sprintf("# look at what %s is doing%s; if it is stuck, restart it or free the lock: %s",
				whoQuoted, traceHint(h.TraceID), freeCommand(d.store, l)))
	}
	if state == "gone" {
		rest := "it expires by itself"
		if l.TTLKnown {
			rest = "it expires by itself in " + l.TTL.String()
		} else if l.NoTTL {
			rest = "it never expires by itself"
		}
		f(KindHolderDead, SeverityWarning,
			fmt.Sprintf("held by %s, whose heartbeats are gone: the holder is dead or cut off; %s", who, rest),
			fmt.Sprintf("# confirm %s is gone, then free the lock: %s", whoQuoted, freeCommand(d.store, l)))
	}
	return state
}

func roundUpSecond(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

func traceHint(trace string) string {
	if trace == "" {
		return ""
	}
	return " (trace " + shellquote.Quote(trace) + ")"
}

// freeCommand is the command that frees a lock now. On etcd it deletes the
// holder's queue entry, which hands the lock to the next waiter; a holder
// still alive sees ErrLockLost (its watch sees the deletion). etcdlock's
// entry names hold a NUL, which no shell can pass to etcdctl: such an
// entry is removed by revoking its lease (the 16 hex digits that end its
// name, so nothing the store does not already show), when the entry is the
// only key the lease holds, as etcdlock's are (a lease per Acquire).
// Revoking a lease that holds other keys (another writer's session lease)
// would delete them too: the other locks of that session, another app's
// keys.
func freeCommand(s Store, l *Lock) string {
	if s.Backend() == "redis" {
		if strings.Contains(l.StoreKey, "\x00") {
			return "delete the key through " + redisNULKey
		}
		return s.cli() + " DEL " + shellquote.Quote(l.StoreKey)
	}
	if !strings.Contains(l.StoreKey, "\x00") {
		return s.cli() + " del " + shellquote.Quote(l.StoreKey)
	}
	switch {
	case l.Lease == 0:
		return "delete the entry through a client library or the agent's remediation API (etcdctl cannot pass the NUL in its name)"
	case l.LeaseKeys == 1:
		return s.cli() + " lease revoke " + strconv.FormatInt(l.Lease, 16)
	case l.LeaseKeys > 1:
		return fmt.Sprintf("delete the entry through a client library (etcdctl cannot pass the NUL in its name, and revoking its lease would delete the %d other keys the lease holds)", l.LeaseKeys-1)
	}
	return "delete the entry through a client library (etcdctl cannot pass the NUL in its name, and revoking its lease would delete any other key the lease holds)"
}

// redisNULKey is what an action says in place of a redis-cli command on a
// Redis key that holds a NUL: no shell argument carries a NUL, and the
// quoted key, $'lock:q\x00…', would reach redis-cli as lock:q, another
// key, whose lock PEXPIRE or DEL would change.
const redisNULKey = "a client library (redis-cli cannot pass the NUL in the key's name: the quoted key would name the key before the NUL, another lock); the agent's DELETE /api/v1/locks?key_base64=KEY_BASE64 deletes it when it has no TTL"

// etcdGet is the etcdctl get of a lock's entry. An entry named with a NUL,
// which no shell argument carries, is listed with the rest of its queue:
// the range from the name before the NUL to that name and \x01 holds
// every "<key>\x00…" entry and no other lock's ("<key>b…" sorts after its
// end; --prefix up to the NUL would list those too). Of other keys, only
// one named exactly <key> (not etcdlock's layout) can be in it.
func etcdGet(s Store, l *Lock) string {
	if before, _, ok := strings.Cut(l.StoreKey, "\x00"); ok {
		return s.cli() + " get " + shellquote.Quote(before) + " " + shellquote.Quote(before+"\x01")
	}
	return s.cli() + " get " + shellquote.Quote(l.StoreKey)
}
