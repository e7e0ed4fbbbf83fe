package etcdlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/testenv"
)

var errReplyLost = errors.New("reply lost (injected after etcd applied the txn)")

// lostReplyKV applies the next write transaction after it is armed and then
// reports its reply lost, as a connection that breaks after the request
// reached etcd does.
type lostReplyKV struct {
	clientv3.KV
	armed atomic.Bool
}

func (k *lostReplyKV) Txn(ctx context.Context) clientv3.Txn {
	return &lostReplyTxn{Txn: k.KV.Txn(ctx), kv: k}
}

type lostReplyTxn struct {
	clientv3.Txn
	kv    *lostReplyKV
	write bool
}

func (t *lostReplyTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *lostReplyTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.write = t.write || len(ops) > 0
	t.Txn = t.Txn.Then(ops...)
	return t
}
func (t *lostReplyTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.write = t.write || len(ops) > 0
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *lostReplyTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && t.write && t.kv.armed.CompareAndSwap(true, false) {
		return nil, errReplyLost
	}
	return resp, err
}

// The client never re-sends a write txn that may have reached etcd
// (clientv3 retries a Txn only when it could not be sent), so Release never
// meets its own earlier delete; a release whose reply is lost returns the
// transport error. Do then reports that error, not ErrLockLost: fn ran under
// the lock.
func TestDo_ReleaseWhoseReplyIsLostIsNotALockLoss(t *testing.T) {
	t.Parallel()
	c := testenv.NewEtcd(t).Client(t)
	kv := &lostReplyKV{KV: c.KV}
	c.KV = kv
	l := newLocker(t, c)
	const key = "lost-reply"
	ran := false
	err := instrument.Do(timeout(t, 10*time.Second), l, key, func(context.Context) error {
		ran = true
		kv.armed.Store(true) // the next write is the release
		return nil
	})
	if !ran {
		t.Fatalf("fn did not run: %v", err)
	}
	if errors.Is(err, instrument.ErrLockLost) || !errors.Is(err, errReplyLost) {
		t.Fatalf("Do after a release whose reply was lost: %v, want the release's error and not ErrLockLost", err)
	}
	if n := queueLen(t, c, l, key); n != 0 {
		t.Fatalf("%d entries left: the release did not apply", n)
	}
}
