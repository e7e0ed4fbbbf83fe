// Package etcdfence writes to etcd only while an etcdlock lease still holds
// its lock: every write is a transaction whose comparison is the lock's
// queue entry with the lease's create revision (its fence), so the check
// and the write are one atomic step in etcd.
//
//	lease, err := locker.Acquire(ctx, "lock:order:7", instrument.WithTTL(5*time.Second))
//	...
//	g, err := etcdfence.For(ctx, cli, locker, lease)
//	err = g.Put(ctx, "orders/7/state", "paid")
//	if errors.Is(err, fence.ErrStaleFence) { /* the lock is gone or someone else's */ }
//
// Guard.Cmp gives the comparison for transactions of one's own.
//
// # Guarantees
//
// A guarded write applies only if, at its revision, the lease's entry exists
// with the lease's create revision, that is, while this lease holds the lock
// in etcd: a later holder cannot have taken it (etcdlock hands the lock to
// the lowest create revision under the key's queue prefix, and a newer
// entry cannot be first while ours exists). Unlike the Redis and SQL fences,
// a lease may write any number of times, and a stale write is refused even
// when no newer holder has written yet.
//
// # Failure modes
//
// For costs one linearizable range read to find the entry (once per Guard);
// every write is one transaction. A write whose reply is lost returns the
// transport error (clientv3 does not resend a transaction that may have
// reached etcd); read the key to learn whether it applied.
package etcdfence

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/fence"
)

// Guard is one lease's write guard: the name of its queue entry and its
// create revision. It is safe for concurrent use.
type Guard struct {
	c      *clientv3.Client
	key    string // the lock key
	prefix string // the lock's queue prefix
	entry  string // our queue entry
	rev    int64
}

// For finds lease's queue entry with one read and returns its Guard.
// locker must be the etcdlock Locker (or the one Govern wraps) that issued
// lease; lease's Fence is the entry's create revision. It returns a
// *fence.StaleFenceError when the entry is already gone.
func For(ctx context.Context, c *clientv3.Client, locker *etcdlock.Locker, lease instrument.Lease) (*Guard, error) {
	if c == nil || locker == nil || lease == nil {
		return nil, errors.New("etcdfence: nil client, locker or lease")
	}
	f := lease.Fence()
	if f == 0 {
		return nil, fence.ErrNoFence
	}
	g := &Guard{c: c, key: lease.Key(), prefix: locker.QueuePrefix(lease.Key()), rev: int64(f)}
	resp, err := c.Get(ctx, g.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithMinCreateRev(g.rev), clientv3.WithMaxCreateRev(g.rev))
	if err != nil {
		return nil, fmt.Errorf("etcdfence: find the entry of %q: %w", g.key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, g.stale(ctx, g.key)
	}
	g.entry = string(resp.Kvs[0].Key)
	return g, nil
}

// Fence is the lease's fence, the entry's create revision.
func (g *Guard) Fence() uint64 { return uint64(g.rev) }

// Cmp holds while the lease's entry exists with the lease's create
// revision: put it in the If of a transaction of one's own.
func (g *Guard) Cmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(g.entry), "=", g.rev)
}

// Put writes key = val if the lease still holds the lock; see Txn.
func (g *Guard) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) error {
	return g.Txn(ctx, clientv3.OpPut(key, val, opts...))
}

// Txn runs ops in one transaction if the lease still holds the lock. It
// returns a *fence.StaleFenceError (Stored: the create revision of the
// lock's holder now, 0 when free) when it does not, and the transport error
// when the outcome is unknown.
func (g *Guard) Txn(ctx context.Context, ops ...clientv3.Op) error {
	if len(ops) == 0 {
		return errors.New("etcdfence: no operations")
	}
	resp, err := g.c.Txn(ctx).If(g.Cmp()).Then(ops...).Else(g.headOp()).Commit()
	if err != nil {
		return fmt.Errorf("etcdfence: guarded write under %q: %w", g.key, err)
	}
	if resp.Succeeded {
		return nil
	}
	var stored uint64
	if rr := resp.Responses; len(rr) == 1 && rr[0].GetResponseRange() != nil && len(rr[0].GetResponseRange().Kvs) > 0 {
		stored = uint64(rr[0].GetResponseRange().Kvs[0].CreateRevision)
	}
	return &fence.StaleFenceError{Store: "etcd", Key: g.key, Stored: stored, Offered: uint64(g.rev)}
}

// headOp reads the lock's current holder entry: the lowest create revision.
func (g *Guard) headOp() clientv3.Op {
	return clientv3.OpGet(g.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
}

func (g *Guard) stale(ctx context.Context, key string) error {
	var stored uint64
	if resp, err := g.c.Do(ctx, g.headOp()); err == nil && resp.Get() != nil && len(resp.Get().Kvs) > 0 {
		stored = uint64(resp.Get().Kvs[0].CreateRevision)
	}
	return &fence.StaleFenceError{Store: "etcd", Key: key, Stored: stored, Offered: uint64(g.rev)}
}
