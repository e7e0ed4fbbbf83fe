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
// writes, and a raise of the high-water mark also on the mark's mod revision, so the mark
// never decreases. The high-water key is kept without a lease, deliberately: there is at
// most one per WorkerID, and it must outlive every holder.
func NewEtcd(c *clientv3.Client, opts ...Option) (*Registry, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil etcd client", ErrInvalid)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.acksSet {
		// Refused rather than ignored: a caller who asked for it expects a guarantee.
		return nil, fmt.Errorf("%w: WithReplicaAcks is for Redis: etcd acknowledges a write only once a quorum of its members has it, and a newly elected leader has every acknowledged write", ErrInvalid)
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
	l.etcdLease = int64(grant.ID) // for abandon, should the claim fail from here on
	txn, err := b.claimTxn(ctx, l, grant.ID)
	if err != nil {
		_, held := errors.AsType[*CollisionError](err)
		_, other := errors.AsType[*SpaceMismatchError](err)
		if held || other {
			// Refused: the grant holds nothing, revoke it rather than leave it to
			// expire. A fresh context: ctx may be why we failed.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			_, _ = b.c.Revoke(rctx, grant.ID)
			cancel()
		}
		return 0, 0, err
	}
	l.etcdRevision = txn.Header.Revision
	// etcd keeps the mark without a lease and does not lose acknowledged writes, so a
	// missing mark means the slot was never used: floor 0.
	l.hwMark, l.hwRevision = 0, 0
	if kvs := txn.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		if l.hwMark, err = parseMark(kvs[0].Value); err != nil {
			return 0, 0, fmt.Errorf("workerid: etcd high-water mark of worker id %d: %w", l.claim.WorkerID, err)
		}
		l.hwRevision = kvs[0].ModRevision
	}
	floor := l.hwMark
	st, reserve, err := b.raise(ctx, l, max(floor, b.cfg.wall().UnixMilli())+b.cfg.ttl.Milliseconds())
	switch {
	case err != nil:
		return 0, 0, fmt.Errorf("workerid: etcd high-water mark: %w", err)
	case st != renewed:
		return 0, 0, fmt.Errorf("%w: worker id %d: slot changed owner while claiming", ErrCollision, l.claim.WorkerID)
	}
	return floor, reserve, nil
}

// claimTxnAttempts bounds claimTxn's rounds: each further round follows a change of the
// space key between two of them (created by another claim, or deleted by hand).
const claimTxnAttempts = 4

// claimTxn creates the slot key on grant if it does not exist and the slot's space key
// records the Registry's ID space or nothing (then it writes it), reading the high-water
// mark in the same transaction, and returns that transaction, which succeeded: its
// Responses[1] is the mark's range. It fails with *SpaceMismatchError when the space key
// records another space (whether or not the slot is held), with *CollisionError when
// another owner holds the slot.
//
// etcd cannot compare "missing or equal" in one condition (a value comparison on a
// missing key fails), so the first round expects the space recorded, as on every slot
// used since the space key exists, and a round that finds it missing expects it missing.
func (b *etcdBackend) claimTxn(ctx context.Context, l *leaseState, grant clientv3.LeaseID) (*clientv3.TxnResponse, error) {
	want := b.cfg.space()
	recorded := true // expect the space key to hold want (false: to be missing)
	for range claimTxnAttempts {
		spaceCmp := clientv3.Compare(clientv3.Value(l.spaceKey), "=", want)
		then := []clientv3.Op{clientv3.OpPut(l.key, string(l.value), clientv3.WithLease(grant)), clientv3.OpGet(l.hwKey)}
		if !recorded {
			spaceCmp = clientv3.Compare(clientv3.Version(l.spaceKey), "=", 0)
			// Without a lease, as the mark: it says which space the mark's IDs are in.
			then = append(then, clientv3.OpPut(l.spaceKey, want))
		}
		txn, err := b.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", 0), spaceCmp).
			Then(then...).
			Else(clientv3.OpGet(l.key), clientv3.OpGet(l.spaceKey)).
			Commit()
		if err != nil {
			return nil, fmt.Errorf("workerid: etcd claim worker id %d: %w", l.claim.WorkerID, err)
		}
		if txn.Succeeded {
			return txn, nil
		}
		slot, space := txn.Responses[0].GetResponseRange().GetKvs(), txn.Responses[1].GetResponseRange().GetKvs()
		switch {
		case len(space) > 0 && string(space[0].Value) != want:
			return nil, &SpaceMismatchError{Service: l.claim.Service, WorkerID: l.claim.WorkerID, Key: l.key, Slot: string(space[0].Value), Registry: want}
		case len(slot) > 0:
			s, _ := decodeStored(slot[0].Value)
			return nil, &CollisionError{Service: l.claim.Service, WorkerID: l.claim.WorkerID, Holder: s.Claim}
		}
		// The slot is free and the space key is not as this round expected: take it as
		// it is now.
		recorded = len(space) > 0
	}
	return nil, fmt.Errorf("workerid: etcd claim worker id %d: the slot's space key %s changed between each of %d rounds", l.claim.WorkerID, l.spaceKey, claimTxnAttempts)
}

// abandon revokes the grant of l's failed claim, which deletes the slot key if the claim
// created it; the mark stays as the claim may have raised it. A live lease's re-claim
// (reclaim) is abandoned the same way: its slot would be under a grant and create
// revision the lease does not know, which the next renewal would take for another
// owner's.
func (b *etcdBackend) abandon(ctx context.Context, l *leaseState, _ bool) error {
	if l.etcdLease == 0 {
		return nil // no grant: nothing was taken
	}
	_, err := b.c.Revoke(ctx, clientv3.LeaseID(l.etcdLease))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		err = nil
	}
	return err
}

func parseMark(v []byte) (int64, error) {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: high-water mark %q is not a Unix millisecond", ErrInvalid, v)
	}
	return n, nil
}

// raise persists max(stored mark, want) as the slot's high-water mark while l holds the
// slot, and returns it. The write is conditioned on the mark's mod revision, so the stored
// mark never decreases: a holder whose clock is behind an earlier holder's must not lower
// the mark that holder reserved, or the next holder after it would issue inside that
// holder's range. One round trip when the mark is as l last saw it.
func (b *etcdBackend) raise(ctx context.Context, l *leaseState, want int64) (renewStatus, int64, error) {
	for {
		reserve := max(l.hwMark, want)
		txn, err := b.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.etcdRevision),
				clientv3.Compare(clientv3.ModRevision(l.hwKey), "=", l.hwRevision)).
			Then(clientv3.OpPut(l.hwKey, strconv.FormatInt(reserve, 10))).
			Else(clientv3.OpGet(l.key), clientv3.OpGet(l.hwKey)).
			Commit()
		if err != nil {
			return 0, 0, err
		}
		if txn.Succeeded {
			l.hwMark, l.hwRevision = reserve, txn.Header.Revision
			return renewed, reserve, nil
		}
		slot := txn.Responses[0].GetResponseRange().GetKvs()
		switch {
		case len(slot) == 0:
			return missing, 0, nil
		case slot[0].CreateRevision != l.etcdRevision:
			return stolen, 0, nil
		}
		// The mark changed since l saw it: take the stored one into account and retry.
		l.hwMark, l.hwRevision = 0, 0
		if kvs := txn.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
			if l.hwMark, err = parseMark(kvs[0].Value); err != nil {
				return 0, 0, err
			}
			l.hwRevision = kvs[0].ModRevision
		}
	}
}

// renew keeps the slot's grant alive and raises the mark. etcd records no floor with the
// slot (0): a re-claim that committed with its reply lost is abandoned, or found under
// another create revision (stolen).
func (b *etcdBackend) renew(ctx context.Context, l *leaseState) (renewStatus, int64, int64, time.Duration, error) {
	ka, err := b.c.KeepAliveOnce(ctx, clientv3.LeaseID(l.etcdLease))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return missing, 0, 0, 0, nil
	}
	if err != nil {
		return 0, 0, 0, 0, err
	}
	st, reserve, err := b.raise(ctx, l, b.cfg.wall().UnixMilli()+b.cfg.ttl.Milliseconds())
	if err != nil || st != renewed {
		return st, 0, 0, 0, err
	}
	return renewed, reserve, 0, time.Duration(ka.TTL) * time.Second, nil
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
