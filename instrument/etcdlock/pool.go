package etcdlock

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxIdleLeases bounds the idle leases a Locker keeps per TTL.
const maxIdleLeases = 8

// leasePool keeps the leases of released locks for the next Acquire with the
// same TTL, which saves a grant and a revoke (two raft writes and two round
// trips) per lock. An idle lease is not kept alive: it is reused only while
// at least two thirds of its TTL are left, and otherwise simply expires, so
// an idle Locker leaves at most maxIdleLeases leases behind for one TTL.
// Reuse is safe because ownership is checked by the entry's create revision,
// which is new for every acquisition, never by the lease ID.
type leasePool struct {
	mu   sync.Mutex
	idle map[int64][]idleLease // by granted TTL in seconds
}

type idleLease struct {
	id      clientv3.LeaseID
	expires time.Time
}

// get returns a lease with ttlSec seconds asked for: an idle one if a fresh
// enough one exists (pooled true), else a new grant. sent is the instant its
// TTL counts from.
// reuse false always grants (WithoutWatchdog: the TTL must count from now).
func (p *leasePool) get(ctx context.Context, c *clientv3.Client, ttlSec int64, reuse bool) (id clientv3.LeaseID, ttl time.Duration, sent time.Time, pooled bool, err error) {
	p.mu.Lock()
	for list := p.idle[ttlSec]; reuse && len(list) > 0; list = p.idle[ttlSec] {
		e := list[len(list)-1]
		p.idle[ttlSec] = list[:len(list)-1]
		ttl = time.Duration(ttlSec) * time.Second
		if time.Until(e.expires) > 2*ttl/3 {
			p.mu.Unlock()
			return e.id, ttl, e.expires.Add(-ttl), true, nil
		}
	}
	p.mu.Unlock()
	sent = time.Now()
	g, err := c.Grant(ctx, ttlSec)
	if err != nil {
		return 0, 0, time.Time{}, false, err
	}
	return g.ID, time.Duration(g.TTL) * time.Second, sent, false, nil
}

// put offers a lease whose lock was released; it reports false when the
// pool is full and the caller should revoke it.
func (p *leasePool) put(ttlSec int64, id clientv3.LeaseID, expires time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle == nil {
		p.idle = make(map[int64][]idleLease)
	}
	if len(p.idle[ttlSec]) >= maxIdleLeases {
		return false
	}
	p.idle[ttlSec] = append(p.idle[ttlSec], idleLease{id: id, expires: expires})
	return true
}
