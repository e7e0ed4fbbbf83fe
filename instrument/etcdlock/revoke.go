package etcdlock

import (
	"context"
	"errors"
	"maps"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
)

// maxPendingRevokes bounds the leases one Locker keeps trying to revoke in
// the background.
const maxPendingRevokes = 4096

// revokeRetry is the pause between two rounds of background revokes:
// 50 ms doubling to 1 s, jittered so that the Lockers of many processes
// that failed in one outage do not retry in step.
var revokeRetry = instrument.ExponentialBackoff(settleFirst, settleMax)

// revoker revokes, in the background, the leases whose revoke did not get
// through when an Acquire gave up (within its caller's time, or
// cleanupGrace after its end: abandon) or when a Release could not confirm
// its delete. Such a lease may still carry its queue entry, and nobody
// renews it any more: without a revoke the lock, or a place ahead of every
// later waiter, stays taken by nobody for the lease's whole TTL. The usual
// causes are a connection that broke under an attempt (its reply lost, so
// the entry may stand though no reply said so), which the revoke that
// follows meets too, and a waiter that gives up while etcd cannot be
// reached or has no leader.
//
// One goroutine per Locker, started by the first pending lease and gone
// when none is left or the client is closed, revokes the leases one at a
// time, each bounded by cleanupTimeout, and ends a round at the first that
// fails (etcd is still out of reach: the others would fail too), so an
// outage costs one request in flight per Locker. A lease is done when its
// revoke succeeds or when etcd no longer knows it (it expired meanwhile),
// not after some time: a lease does not expire while etcd has no leader,
// and the leader elected after an outage gives every lease its whole TTL
// again (etcd's LeaseCheckpoint is off by default), so however long the
// revoke has failed, the entry may still stand once etcd is back. Past
// maxPendingRevokes a lease is left to its TTL.
type revoker struct {
	mu      sync.Mutex
	pending map[clientv3.LeaseID]struct{}
	running bool
}

// revokeLater revokes lease id in the background.
func (l *Locker) revokeLater(id clientv3.LeaseID) {
	if l.c.Ctx().Err() != nil {
		return // a closed client sends nothing again
	}
	r := &l.revokes
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) >= maxPendingRevokes {
		return
	}
	if r.pending == nil {
		r.pending = make(map[clientv3.LeaseID]struct{})
	}
	r.pending[id] = struct{}{}
	if !r.running {
		r.running = true
		go l.revokePending()
	}
}

// revokePending is the revoker's goroutine.
func (l *Locker) revokePending() {
	r := &l.revokes
	stop := l.c.Ctx()
	for round := 1; ; round++ {
		if sleepCtx(stop, stop, revokeRetry.Delay(round)) != nil {
			r.mu.Lock()
			clear(r.pending)
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		pending := maps.Clone(r.pending)
		r.mu.Unlock()
		for id := range pending {
			ctx, cancel := context.WithTimeout(stop, cleanupTimeout)
			_, err := l.c.Revoke(ctx, id)
			cancel()
			if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				break
			}
			r.mu.Lock()
			delete(r.pending, id)
			r.mu.Unlock()
		}
		r.mu.Lock()
		if len(r.pending) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
}

// revoke gives the lease up on ctx, and in the background (revoker) if that
// does not get through and later says so: our queue entry may still stand,
// or ctx has ended, so that nothing else would revoke the lease before its
// TTL.
func (st *leaseState) revoke(ctx context.Context, later bool) {
	_, err := st.l.c.Revoke(ctx, st.id)
	if err != nil && later && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		st.l.revokeLater(st.id)
	}
}
