package redislock

import (
	"fmt"
	"time"

	"github.com/lockgov/lockgov/instrument"
)

// Each constructor has its own option type, so that an option that does
// not apply to a mode does not compile instead of being ignored (the
// marker-method style of go-redis's redisotel): New takes Option, NewQuorum
// takes QuorumOption, and the options that apply to both return
// CommonOption, which is both.

// Option configures a Locker made by New (one node, or one node in Fair
// mode).
type Option interface {
	applyNew(*options)
}

// QuorumOption configures a Locker made by NewQuorum.
type QuorumOption interface {
	applyQuorum(*options)
}

// CommonOption configures a Locker made by either constructor.
type CommonOption interface {
	Option
	QuorumOption
}

type options struct {
	// Both constructors.
	retention time.Duration
	service   string
	instance  string

	// New.
	idleTimeout  time.Duration
	fair         bool
	waiterTTL    time.Duration
	waiterTTLSet bool
	acks         replicaAcks

	// NewQuorum.
	driftFactor float64
	nodeTimeout time.Duration
}

func defaultOptions() options {
	return options{
		retention:   DefaultFenceRetention,
		idleTimeout: DefaultIdleTimeout,
		waiterTTL:   DefaultWaiterTimeout,
		driftFactor: DefaultDriftFactor,
	}
}

// newOption applies to New only, quorumOption to NewQuorum only,
// commonOption to both.
type (
	newOption    func(*options)
	quorumOption func(*options)
	commonOption func(*options)
)

func (f newOption) applyNew(o *options)       { f(o) }
func (f quorumOption) applyQuorum(o *options) { f(o) }
func (f commonOption) applyNew(o *options)    { f(o) }
func (f commonOption) applyQuorum(o *options) { f(o) }

// WithFenceRetention sets how long a key's fence counter lives beyond one
// TTL (default 10 minutes): each acquire attempt re-arms it to TTL +
// retention. Fences follow the Redis server's clock in microseconds (each
// is max(counter + 1, clock)); the counter keeps them increasing when the
// clock steps back by less than its lifetime. After it expires the next
// fence is the clock alone, still larger than every earlier fence unless
// the server clock stepped back by more than the time since the last
// attempt. See the package doc for what fences promise after a failover.
func WithFenceRetention(d time.Duration) CommonOption {
	return commonOption(func(o *options) { o.retention = d })
}

// WithService names the service in lock values (default: the executable name).
func WithService(name string) CommonOption {
	return commonOption(func(o *options) { o.service = name })
}

// WithInstance names this instance in lock values (default: the host name).
func WithInstance(name string) CommonOption {
	return commonOption(func(o *options) { o.instance = name })
}

// WithIdleTimeout sets how long a Locker keeps its pub/sub connection after
// the last waiter left (default 30s), and how long it stays subscribed to a
// key's release channel after the last waiter of that key left. Waiting
// often on the same keys then costs neither a connection nor a SUBSCRIBE.
// It must be > 0. Close ends both at once.
//
// It is an Option of New only: quorum waiters poll and never subscribe.
func WithIdleTimeout(d time.Duration) Option {
	return newOption(func(o *options) { o.idleTimeout = d })
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
// waiter deadlines, both under a TTL). It needs one queue, so it is an
// Option of New only, not of NewQuorum.
func Fair() Option {
	return newOption(func(o *options) { o.fair = true })
}

// WithWaiterTimeout sets how long a fair-mode waiter keeps its place without
// retrying (default 5s, at least 30ms). Waiters retry at a third of it. New
// refuses it without Fair.
func WithWaiterTimeout(d time.Duration) Option {
	return newOption(func(o *options) { o.waiterTTL, o.waiterTTLSet = d, true })
}

// WithReplicaAcks makes every acquire and renewal wait until n replicas
// have acknowledged it, with WAIT n timeout on the connection that ran the
// script (Redisson's "sync slaves"), so that a failover to one of those
// replicas keeps the lock. An Acquire whose lock fewer than n replicas
// acknowledged within timeout gives the lock back and fails with an error
// holding a *NotReplicatedError (errors.Is: ErrNotReplicated); a renewal so left unacknowledged does not
// extend the lease. Releases do not wait. See "Replica acknowledgements"
// in the package doc for what this does and does not promise.
//
// n must be >= 1 and timeout > 0 and at most the client's ReadTimeout
// less 250ms (the WAIT reply is read within ReadTimeout, and Redis answers
// a WAIT that timed out at its next timer tick, up to 100ms late at the
// default hz). WAIT counts in milliseconds: timeout is rounded up to a
// whole one (never to WAIT's 0, which blocks). New refuses it on a client that does not
// send a pipeline to one node on one connection (Cluster, Ring); it is an
// Option of New only: a quorum's nodes are independent primaries.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return newOption(func(o *options) { o.acks = replicaAcks{n: n, timeout: timeout, set: true} })
}

// WithDriftFactor sets the clock drift factor of quorum mode (default 0.01,
// in [0, 0.5)): a lease is valid for TTL - elapsed - TTL*factor - 2ms after
// the attempt started, and its context ends at that point unless renewed.
func WithDriftFactor(f float64) QuorumOption {
	return quorumOption(func(o *options) { o.driftFactor = f })
}

// WithNodeTimeout bounds each node's reply in quorum mode (default TTL/20,
// between 50 and 250 ms), so that a dead node costs little of the lease.
func WithNodeTimeout(d time.Duration) QuorumOption {
	return quorumOption(func(o *options) { o.nodeTimeout = d })
}

// applyNewOptions applies and checks the options of New.
func applyNewOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt.applyNew(&o)
		}
	}
	if o.waiterTTLSet && !o.fair {
		return o, fmt.Errorf("%w: redislock.New: WithWaiterTimeout applies only with Fair", instrument.ErrInvalidOption)
	}
	if o.waiterTTL < 30*time.Millisecond {
		return o, fmt.Errorf("%w: redislock: waiter timeout %v must be >= 30ms", instrument.ErrInvalidOption, o.waiterTTL)
	}
	if o.idleTimeout <= 0 {
		return o, fmt.Errorf("%w: redislock: idle timeout %v must be > 0", instrument.ErrInvalidOption, o.idleTimeout)
	}
	if o.acks.set {
		if o.acks.n < 1 {
			return o, fmt.Errorf("%w: redislock: replica acks %d must be >= 1 (without WithReplicaAcks nothing waits for replicas)", instrument.ErrInvalidOption, o.acks.n)
		}
		if o.acks.timeout <= 0 {
			return o, fmt.Errorf("%w: redislock: replica ack timeout %v must be > 0 (WAIT 0 would block until the replicas answer)", instrument.ErrInvalidOption, o.acks.timeout)
		}
	}
	return o, o.validate()
}

// applyQuorumOptions applies and checks the options of NewQuorum.
func applyQuorumOptions(opts []QuorumOption) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt.applyQuorum(&o)
		}
	}
	if o.driftFactor < 0 || o.driftFactor >= 0.5 {
		return o, fmt.Errorf("%w: redislock.NewQuorum: drift factor %v must be in [0, 0.5)", instrument.ErrInvalidOption, o.driftFactor)
	}
	if o.nodeTimeout < 0 {
		return o, fmt.Errorf("%w: redislock.NewQuorum: node timeout %v must be >= 0", instrument.ErrInvalidOption, o.nodeTimeout)
	}
	return o, o.validate()
}

// validate checks the options both constructors take.
func (o *options) validate() error {
	if o.retention <= 0 {
		return fmt.Errorf("%w: redislock: fence retention %v must be > 0", instrument.ErrInvalidOption, o.retention)
	}
	return nil
}
