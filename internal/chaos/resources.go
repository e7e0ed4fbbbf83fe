package chaos

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/fence/etcdfence"
	"github.com/lockgov/lockgov/instrument/fence/redisfence"
)

// RedisResource is a value in Redis written with redisfence.
type RedisResource struct {
	W   *redisfence.Writer
	Key string
}

// Write is a fenced SET of value.
func (r RedisResource) Write(ctx context.Context, lease instrument.Lease, value string) error {
	return r.W.Set(ctx, r.Key, value, lease.Fence(), 0)
}

// Read reads the value and its fence; nothing written yet reads as "", 0.
func (r RedisResource) Read(ctx context.Context) (string, uint64, error) {
	v, f, err := r.W.Get(ctx, r.Key)
	if errors.Is(err, redis.Nil) {
		return "", 0, nil
	}
	return v, f, err
}

// EtcdResource is a key in etcd written through an etcdfence Guard of the
// lease: applied only while the lease holds the lock.
type EtcdResource struct {
	C      *clientv3.Client
	Locker *etcdlock.Locker // the Locker that issued the leases
	Key    string
}

// Write puts value guarded by lease.
func (r EtcdResource) Write(ctx context.Context, lease instrument.Lease, value string) error {
	g, err := etcdfence.For(ctx, r.C, r.Locker, lease)
	if err != nil {
		return err
	}
	return g.Put(ctx, r.Key, value)
}

// Read reads the value; its fence is the one encoded in it.
func (r EtcdResource) Read(ctx context.Context) (string, uint64, error) {
	resp, err := r.C.Get(ctx, r.Key)
	if err != nil {
		return "", 0, err
	}
	if len(resp.Kvs) == 0 {
		return "", 0, nil
	}
	v := string(resp.Kvs[0].Value)
	return v, ValueFence(v), nil
}
