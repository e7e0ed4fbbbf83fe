package agent

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
)

// Where agents elect their leader and where the leader publishes its
// findings for the followers.
const (
	etcdElectionPrefix = "/lockgov/agent/leader"
	redisLeaderKey     = "lockgov:agent:leader"
	etcdRecordKey      = "/lockgov/agent/record"
	redisRecordKey     = "lockgov:agent:record"
)

// term is one period of leadership. Its context ends when the leadership
// does (lost lease or session, or the agent stopping); its fence orders
// terms: a later leader has a larger fence.
type term struct {
	ctx   context.Context
	fence uint64
	// etcdKey is the leader key of an etcd term: writes that must stop
	// with the term compare its create revision with fence.
	etcdKey string
}

// elector campaigns for leadership until ctx ends, calling lead with each
// term won; lead returns when the term's context ends.
type elector interface {
	run(ctx context.Context, lead func(term))
}

// sessionTTL is the lease TTL of a leader: a leader that dies without
// resigning is replaced after about that long; one that stops resigns at once.
func sessionTTL(interval time.Duration) time.Duration {
	return max(interval, time.Second)
}

// etcdElector elects through concurrency.Election on one session.
type etcdElector struct {
	s        *store
	id       string
	interval time.Duration
	log      *slog.Logger
	quiet    onceLogger
}

func (e *etcdElector) run(ctx context.Context, lead func(term)) {
	ttl := int(math.Ceil(sessionTTL(e.interval).Seconds()))
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(e.s.etcd, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
		if err != nil {
			e.quiet.warn(e.log, "agent: election session", e.s.name, err)
			pause(ctx, e.interval)
			continue
		}
		el := concurrency.NewElection(sess, etcdElectionPrefix)
		cctx, cancel := context.WithCancel(ctx)
		go func() { // a lost session ends the campaign too
			select {
			case <-sess.Done():
			case <-cctx.Done():
			}
			cancel()
		}()
		if err := el.Campaign(cctx, e.id); err != nil {
			cancel()
			closeSession(sess)
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				e.quiet.warn(e.log, "agent: campaign", e.s.name, err)
			}
			pause(ctx, e.interval)
			continue
		}
		e.quiet.reset()
		lead(term{ctx: cctx, fence: uint64(el.Rev()), etcdKey: el.Key()})
		cancel()
		rctx, rcancel := context.WithTimeout(context.Background(), e.interval)
		_ = el.Resign(rctx)
		rcancel()
		closeSession(sess)
	}
}

// closeSession revokes the session's lease, so a follower takes over at
// once, not after the TTL.
func closeSession(s *concurrency.Session) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = s.Client().Revoke(ctx, s.Lease())
	s.Orphan()
}

// redisElector elects through a lockgov lock: the winner holds it, its
// watchdog renews it, and its fence orders the terms.
type redisElector struct {
	s        *store
	locker   *redislock.Locker
	interval time.Duration
	log      *slog.Logger
	quiet    onceLogger
}

func (e *redisElector) run(ctx context.Context, lead func(term)) {
	defer e.locker.Close()
	ttl := sessionTTL(e.interval)
	for ctx.Err() == nil {
		// Wait up to one interval; a release wakes the waiter at once.
		actx, cancel := context.WithTimeout(ctx, e.interval)
		lease, err := e.locker.Acquire(actx, redisLeaderKey, instrument.WithTTL(ttl))
		cancel()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, instrument.ErrNotAcquired) && !errors.Is(err, context.DeadlineExceeded) {
				e.quiet.warn(e.log, "agent: leader lock", e.s.name, err)
				pause(ctx, e.interval)
			}
			continue
		}
		e.quiet.reset()
		e.hold(ctx, lease, lead)
	}
}

// hold leads for as long as lease lives, and releases the lease however
// lead returns (a panic included).
func (e *redisElector) hold(ctx context.Context, lease instrument.Lease, lead func(term)) {
	defer func() {
		rctx, rcancel := context.WithTimeout(context.Background(), e.interval)
		_ = lease.Release(rctx)
		rcancel()
	}()
	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	stop := context.AfterFunc(lease.Context(), tcancel)
	defer stop()
	lead(term{ctx: tctx, fence: lease.Fence()})
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// onceLogger logs an election error once per outage, not every interval.
type onceLogger struct{ logged bool }

func (o *onceLogger) warn(log *slog.Logger, msg, store string, err error) {
	if !o.logged {
		o.logged = true
		log.Warn(msg, "store", store, "err", err, "note", "retrying every interval; logged once until leadership is won")
	}
}

func (o *onceLogger) reset() { o.logged = false }
