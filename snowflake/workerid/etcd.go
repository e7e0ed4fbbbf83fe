package workerid

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// NewEtcd returns a Registry on etcd. A slot key is attached to an etcd lease and created
// by a transaction that succeeds only if the key does not exist (create revision 0); every
// later write is a transaction conditioned on that create revision, so only the owner
// writes. The high-water key is kept without a lease, deliberately: there is at most one
// per WorkerID, and it must outlive every holder.
func NewEtcd(c *clientv3.Client, opts ...Option) (*Registry, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil etcd client", ErrInvalid)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Registry{b: &etcdBackend{c: c, cfg: cfg}, cfg: cfg}, nil
}

type etcdBackend struct {
	c   *clientv3.Client
	cfg config
}

func (*etcdBackend) name() string { return "etcd" }

func (b *etcdBackend) ttlSeconds() int64 {
	return int64((b.cfg.ttl + time.Second - 1) / time.Second)
}

func (b *etcdBackend) claim(ctx context.Context, l *leaseState) (int64, int64, error) {
	grant, err := b.c.Grant(ctx, b.ttlSeconds())
	if err != nil {
		return 0, 0, fmt.Errorf("workerid: etcd grant: %w", err)
	}
	txn, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", 0)).
		Then(clientv3.OpPut(l.key, string(l.value), clientv3.WithLease(grant.ID)), clientv3.OpGet(l.hwKey)).
		Else(clientv3.OpGet(l.key)).
		Commit()
	if err != nil || !txn.Succeeded {
		// Revoke on a fresh context: ctx may be the reason we failed.
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = b.c.Revoke(rctx, grant.ID)
		cancel()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("workerid: etcd claim worker id %d: %w", l.claim.WorkerID, err)
	}
	if !txn.Succeeded {
		var holder Claim
		if kvs := txn.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			s, _ := decodeStored(kvs[0].Value)
			holder = s.Claim
		}
		return 0, 0, &CollisionError{Service: l.claim.Service, WorkerID: l.claim.WorkerID, Holder: holder}
	}
	l.etcdLease, l.etcdRevision = int64(grant.ID), txn.Header.Revision
	var floor int64
	if kvs := txn.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		floor, _ = strconv.ParseInt(string(kvs[0].Value), 10, 64)
	}
	reserve := max(floor, b.cfg.wall().UnixMilli()) + b.cfg.ttl.Milliseconds()
	if err := b.reserve(ctx, l, reserve); err != nil {
		return 0, 0, err
	}
	return floor, reserve, nil
}

// reserve persists the high-water reservation if l still owns the slot.
func (b *etcdBackend) reserve(ctx context.Context, l *leaseState, reserve int64) error {
	txn, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.etcdRevision)).
		Then(clientv3.OpPut(l.hwKey, strconv.FormatInt(reserve, 10))).
		Commit()
	if err != nil {
		return fmt.Errorf("workerid: etcd high-water mark: %w", err)
	}
	if !txn.Succeeded {
		return fmt.Errorf("%w: worker id %d: slot changed owner while claiming", ErrCollision, l.claim.WorkerID)
	}
	return nil
}

func (b *etcdBackend) renew(ctx context.Context, l *leaseState) (renewStatus, int64, time.Duration, error) {
	ka, err := b.c.KeepAliveOnce(ctx, clientv3.LeaseID(l.etcdLease))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return missing, 0, 0, nil
	}
	if err != nil {
		return 0, 0, 0, err
	}
	reserve := b.cfg.wall().UnixMilli() + b.cfg.ttl.Milliseconds()
	txn, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.etcdRevision)).
		Then(clientv3.OpPut(l.hwKey, strconv.FormatInt(reserve, 10))).
		Else(clientv3.OpGet(l.key)).
		Commit()
	if err != nil {
		return 0, 0, 0, err
	}
	if !txn.Succeeded {
		if len(txn.Responses[0].GetResponseRange().GetKvs()) == 0 {
			return missing, 0, 0, nil
		}
		return stolen, 0, 0, nil
	}
	return renewed, reserve, time.Duration(ka.TTL) * time.Second, nil
}

func (b *etcdBackend) release(ctx context.Context, l *leaseState, lastUsed int64) error {
	ops := []clientv3.Op{clientv3.OpDelete(l.key)}
	if lastUsed > 0 {
		ops = append(ops, clientv3.OpPut(l.hwKey, strconv.FormatInt(lastUsed, 10)))
	}
	_, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.etcdRevision)).
		Then(ops...).
		Commit()
	if err != nil {
		return err
	}
	_, err = b.c.Revoke(ctx, clientv3.LeaseID(l.etcdLease))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		err = nil
	}
	return err
}
