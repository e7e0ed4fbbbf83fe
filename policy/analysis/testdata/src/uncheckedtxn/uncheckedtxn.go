package uncheckedtxn

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

type EtcdLock struct {
	client  *clientv3.Client
	key     string
	leaseID clientv3.LeaseID
}

// Spec 002's "etcd 分布式锁安全封装", adapted to compile: the spec checks
// !resp.Succeeded on the lease grant's response, which has no such field;
// the transaction's response, the one that says whether the comparison
// held, goes to _. So a lost race returns a lock.
func NewEtcdLock(client *clientv3.Client, key string, ttl int64) (*EtcdLock, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	resp, err := client.Grant(ctx, ttl)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("failed to grant lease: %w", err)
	}

	lockCtx, lockCancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err = client.Txn(lockCtx).If( // want `etcd create-if-absent Txn \(a lock acquisition\): its response is discarded`
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
	).Then(
		clientv3.OpPut(key, "locked", clientv3.WithLease(resp.ID)),
	).Commit()
	lockCancel()
	if err != nil {
		return nil, errors.New("lock acquisition failed")
	}
	return &EtcdLock{client: client, key: key, leaseID: resp.ID}, nil
}

// Assigned but never checked.
func tryLock(ctx context.Context, c *clientv3.Client, key string) error {
	txn, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Version(key), "=", 0)).Then(clientv3.OpPut(key, "me")).Commit() // want `its response txn is never checked for Succeeded`
	if err != nil {
		return err
	}
	fmt.Println("locked", key, txn != nil)
	return nil
}

// Negatives.

func checked(ctx context.Context, c *clientv3.Client, key string) (bool, error) {
	resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "me")).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

func handedOn(ctx context.Context, c *clientv3.Client, key string) (*clientv3.TxnResponse, error) {
	return c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, "me")).Commit()
}

// An owner-checked write: delete the key only while it is still ours.
func releaseIfOurs(ctx context.Context, c *clientv3.Client, key string, rev int64) error {
	_, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpPut(key, "")).Commit()
	return err
}
