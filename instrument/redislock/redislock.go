package redislock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/lockvalue"
)

// BackendName is the value of the backend label and span attribute.
const BackendName = "redis"

// DefaultFenceRetention is how long a fence counter outlives the last lease
// on its key. See WithFenceRetention.
const DefaultFenceRetention = 10 * time.Minute

// Locker takes locks on one Redis deployment (single node, Sentinel or
// Cluster, through redis.UniversalClient). It is safe for concurrent use.
type Locker struct {
	c         redis.UniversalClient
	q         *quorum // nil unless made by NewQuorum
	opts      options
	notify    notifier
	local     localQueue
	retention time.Duration
	value     lockvalue.Writer
}

// Option configures a Locker.
type Option interface {
	apply(*options)
}

type options struct {
	retention   time.Duration
	service     string
	instance    string
	driftFactor float64
	nodeTimeout time.Duration
	fair        bool
	waiterTTL   time.Duration
	idleTimeout time.Duration
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithFenceRetention sets how long a key's fence counter lives beyond one
// TTL (default 10 minutes): each acquire attempt re-arms it to TTL +
// retention. Fences follow the Redis server's clock in microseconds (each
// is max(counter + 1, clock)); the counter keeps them increasing when the
// clock steps back by less than its lifetime. After it expires the next
// fence is the clock alone, still larger than every earlier fence unless
// the server clock stepped back by more than the time since the last
// attempt. See the package doc for what fences promise after a failover.
func WithFenceRetention(d time.Duration) Option {
	return optionFunc(func(o *options) { o.retention = d })
}

// DefaultWaiterTimeout is how long a fair-mode waiter keeps its place in
// the queue without retrying. See Fair.
const DefaultWaiterTimeout = 5 * time.Second

// Fair makes the Locker hand the lock out in the order waiters asked for it,
// with Redisson FairLock semantics: waiters queue in Redis (FIFO), a waiter
// that stopped retrying for longer than the waiter timeout
// (WithWaiterTimeout, default 5s) is skipped, and a release wakes only the
// waiter at the head of the queue, so a releasing goroutine cannot barge
// back in ahead of the others. Every Locker that takes a given key must
// agree on fairness: a non-fair Locker ignores the queue.
//
// Fair mode costs one more Lua script on give-up, a few more commands per
// attempt, and two short-lived keys per contended lock (the queue and the
// waiter deadlines, both under a TTL).
func Fair() Option {
	return optionFunc(func(o *options) { o.fair = true })
}

// WithWaiterTimeout sets how long a fair-mode waiter keeps its place without
// retrying (default 5s). Waiters retry at a third of it.
func WithWaiterTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.waiterTTL = d })
}

// WithService names the service in lock values (default: the executable name).
func WithService(name string) Option {
	return optionFunc(func(o *options) { o.service = name })
}

// WithInstance names this instance in lock values (default: the host name).
func WithInstance(name string) Option {
	return optionFunc(func(o *options) { o.instance = name })
}

// New returns a Locker on c. The client should have ContextTimeoutEnabled
// set, so that a call never outlives the deadline of its context.
func New(c redis.UniversalClient, opts ...Option) (*Locker, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: redislock.New: nil client", instrument.ErrInvalidOption)
	}
	o := options{retention: DefaultFenceRetention, driftFactor: DefaultDriftFactor, waiterTTL: DefaultWaiterTimeout, idleTimeout: DefaultIdleTimeout}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	if o.waiterTTL < 30*time.Millisecond {
		return nil, fmt.Errorf("%w: redislock: waiter timeout %v must be >= 30ms", instrument.ErrInvalidOption, o.waiterTTL)
	}
	if o.retention <= 0 {
		return nil, fmt.Errorf("%w: redislock: fence retention %v must be > 0", instrument.ErrInvalidOption, o.retention)
	}
	if err := validateIdleTimeout(o.idleTimeout); err != nil {
		return nil, err
	}
	value, err := lockvalue.NewWriter(o.service, o.instance)
	if err != nil {
		return nil, err
	}
	return &Locker{
		c:         c,
		opts:      o,
		notify:    notifier{c: c, idle: o.idleTimeout},
		retention: o.retention,
		value:     value,
	}, nil
}

// Backend returns "redis".
func (l *Locker) Backend() string { return BackendName }

// Acquire takes the lock on key as the options say. See instrument.Locker.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...instrument.AcquireOption) (instrument.Lease, error) {
	if err := instrument.ValidateKey(key); err != nil {
		return nil, err
	}
	keys, err := keysFor(key)
	if err != nil {
		return nil, err
	}
	cfg, err := instrument.ApplyAcquireOptions(opts...)
	if err != nil {
		return nil, err
	}
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("redislock: acquire %q: %w", key, err)
	}
	if l.notify.isClosed() {
		return nil, fmt.Errorf("redislock: acquire %q: %w", key, ErrClosed)
	}
	tok := newToken()
	args := []any{tok, cfg.TTL.Milliseconds(), l.meta(&cfg), (cfg.TTL + l.retention).Milliseconds()}
	kk := []string{keys.lock, keys.fence}

	// Deadline waiters of this Locker take turns locally; the one whose turn
	// it is contends in Redis and keeps the turn while it holds the lease.
	waiting := false
	startWaiting := func() {
		if !waiting {
			cfg.Observer.Waiting(true)
		}
		waiting = true
	}
	var leaveQueue func()
	if cfg.Wait == instrument.WaitDeadline {
		if leaveQueue, err = l.local.enter(ctx, key, startWaiting); err != nil {
			if waiting {
				cfg.Observer.Waiting(false)
			}
			return nil, fmt.Errorf("redislock: acquire %q: %w: %w", key, instrument.ErrNotAcquired, err)
		}
	}
	var w *waiter
	defer func() {
		if leaveQueue != nil {
			leaveQueue()
		}
		if w != nil {
			l.notify.unsubscribe(w)
		}
		if waiting {
			cfg.Observer.Waiting(false)
		}
	}()
	if l.opts.fair {
		once := "0"
		if cfg.Wait == instrument.WaitFailFast {
			once = "1" // one attempt: do not join the queue only to leave it
		}
		kk = append(kk, keys.queue, keys.waiters)
		args = append(args, l.opts.waiterTTL.Milliseconds(), once)
	}
	queued := false
	defer func() {
		if queued {
			l.leaveQueue(ctx, keys, tok)
		}
	}()
	for attempt := 1; ; attempt++ {
		sent := time.Now()
		acquired, val, pos, err := l.attempt(ctx, kk, args, cfg.TTL, tok, keys)
		if err != nil {
			if cerr := context.Cause(ctx); cerr != nil && (w != nil || attempt > 1) {
				return nil, fmt.Errorf("redislock: acquire %q: %w: %w", key, instrument.ErrNotAcquired, cerr)
			}
			return nil, fmt.Errorf("redislock: acquire %q: %w", key, err)
		}
		cfg.Observer.Attempt(acquired)
		if acquired {
			queued = false // acquiring took this waiter out of the queue
			lease := newLease(l, key, keys, tok, uint64(val), sent, &cfg, leaveQueue)
			leaveQueue = nil
			return lease, nil
		}
		queued = l.opts.fair && cfg.Wait != instrument.WaitFailFast
		holderTTL := time.Duration(val) * time.Millisecond

		var sleep time.Duration
		switch cfg.Wait {
		case instrument.WaitFailFast:
			return nil, fmt.Errorf("redislock: acquire %q: %w", key, instrument.ErrNotAcquired)
		case instrument.WaitRetry:
			if attempt >= cfg.MaxAttempts {
				return nil, fmt.Errorf("redislock: acquire %q after %d attempts: %w", key, attempt, instrument.ErrNotAcquired)
			}
			sleep = cfg.Backoff.Delay(attempt)
			startWaiting()
		default: // WaitDeadline
			if l.q != nil {
				// No single node's notification speaks for the majority.
				sleep = pollDelay(holderTTL, cfg.PollInterval)
				startWaiting()
				break
			}
			if w == nil {
				id := ""
				if l.opts.fair {
					id = tok
				}
				if w, err = l.notify.subscribe(ctx, keys.channel, id); err != nil {
					return nil, fmt.Errorf("redislock: acquire %q: subscribe: %w", key, err)
				}
				startWaiting()
				// The holder may have released before the subscription was
				// confirmed; try again as soon as it is.
				if err := waitReady(ctx, w.ready, cfg.PollInterval); err != nil {
					return nil, fmt.Errorf("redislock: acquire %q: %w: %w", key, instrument.ErrNotAcquired, err)
				}
				continue
			}
			sleep = cfg.PollInterval
			if l.opts.fair {
				// Retry often enough to keep the place in the queue.
				sleep = min(sleep, l.opts.waiterTTL/3)
			}
			if holderTTL > 0 && holderTTL < sleep && (!l.opts.fair || pos == 0) {
				// An expiring lock publishes nothing: wake when it expires.
				sleep = holderTTL + time.Millisecond
			}
		}
		if err := l.pause(ctx, w, sleep); err != nil {
			return nil, fmt.Errorf("redislock: acquire %q: %w: %w", key, instrument.ErrNotAcquired, err)
		}
	}
}

// attempt runs the acquire script once, on the node or on the quorum. It
// returns acquired with the fence, or not acquired with the holder's
// remaining TTL in milliseconds.
//
// In fair mode pos is the caller's place in the queue (0: next in line).
func (l *Locker) attempt(ctx context.Context, kk []string, args []any, ttl time.Duration, tok string, keys keySet) (acquired bool, val, pos int64, err error) {
	if l.q != nil {
		acquired, val, err = l.q.acquire(ctx, kk, args, ttl, tok, keys)
		return acquired, val, 0, err
	}
	script := acquireScript
	if l.opts.fair {
		script = acquireFairScript
	}
	res, err := script.Run(ctx, l.c, kk, args...).Int64Slice()
	if err != nil {
		return false, 0, 0, err
	}
	if len(res) < 2 {
		return false, 0, 0, fmt.Errorf("unexpected script reply %v", res)
	}
	if l.opts.fair && res[0] == 0 && len(res) > 2 {
		pos = res[2]
	}
	return res[0] == 1, res[1], pos, nil
}

// leaveQueue takes a fair-mode waiter that gives up out of the queue, so
// the next waiter need not wait for its deadline to pass. Best effort: the
// deadline is the net.
func (l *Locker) leaveQueue(ctx context.Context, keys keySet, tok string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = leaveFairScript.Run(ctx, l.c, []string{keys.lock, keys.queue, keys.waiters}, tok, keys.channel).Err()
}

// refreshOnce runs the owner-checked extension once; ok false with a nil
// error means ownership is proven gone.
func (l *Locker) refreshOnce(ctx context.Context, keys keySet, tok string, ttl time.Duration) (bool, error) {
	if l.q != nil {
		return l.q.refresh(ctx, keys, tok, ttl)
	}
	n, err := refreshScript.Run(ctx, l.c, []string{keys.lock}, tok, ttl.Milliseconds()).Int64()
	return n == 1, err
}

// releaseOnce runs the owner-checked release once; ok false with a nil
// error means the lock was not this token's. ok is also true when a retry
// of this call (go-redis resends a command whose reply was lost) finds the
// tombstone its first try left: that try released it.
func (l *Locker) releaseOnce(ctx context.Context, keys keySet, tok string, ttl time.Duration) (bool, error) {
	if l.q != nil {
		return l.q.release(ctx, keys, tok, ttl)
	}
	if l.opts.fair {
		n, err := releaseFairScript.Run(ctx, l.c, []string{keys.lock, keys.queue, keys.tombstone(tok)},
			tok, keys.channel, tombstoneTTL(ctx)).Int64()
		return n >= 1, err
	}
	n, err := releaseScript.Run(ctx, l.c, []string{keys.lock, keys.tombstone(tok)}, tok, keys.channel, tombstoneTTL(ctx)).Int64()
	return n >= 1, err
}

// tombstoneTTL is how long a release's tombstone lives, in milliseconds:
// as long as the call can be retried, which is until its context ends, plus
// a second for a retry still in flight then; a minute when the context has
// no deadline (go-redis retries end long before).
func tombstoneTTL(ctx context.Context) int64 {
	d := time.Minute
	if dl, ok := ctx.Deadline(); ok {
		d = max(time.Until(dl), 0) + time.Second
	}
	return d.Milliseconds()
}

// pause sleeps for d, or until a release notification, or until ctx ends.
// It returns ErrClosed when the Locker was closed meanwhile.
func (l *Locker) pause(ctx context.Context, w *waiter, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	var wake <-chan struct{}
	if w != nil {
		wake = w.wake
	}
	select {
	case <-t.C:
	case <-wake:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if l.notify.isClosed() {
		return ErrClosed
	}
	return nil
}

func waitReady(ctx context.Context, ready <-chan struct{}, limit time.Duration) error {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C: // not confirmed in time: fall back to polling
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}

// meta builds the JSON object (without its closing brace, which the script
// adds after the fence) stored in the lock value. acquired_at_ms is this
// process's wall clock when it sent the request.
func (l *Locker) meta(cfg *instrument.AcquireConfig) string {
	var b strings.Builder
	b.Grow(160)
	l.value.Begin(&b, lockvalue.Call{TraceID: cfg.TraceID, Labels: cfg.Meta, TTL: cfg.TTL})
	lockvalue.AppendTime(&b, lockvalue.AcquiredAt, time.Now())
	return b.String()
}

// newToken returns 128 random bits, base64url, and the separating space the
// scripts compare as a prefix.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:]) + " "
}

// errNotHeld builds the error for a failed owner check.
func errNotHeld(op, key string) error {
	return fmt.Errorf("redislock: %s %q: %w", op, key, instrument.ErrNotHeld)
}
