// Package etcdstore is the fleet.Store of an etcd cluster: a heartbeat is a
// key attached to a lease of three intervals (rounded up to whole seconds,
// and never below what the server grants), kept alive by each beat, and
// written with its previous key-value (fleet.Swapper). etcdlock.Locker and
// workerid's etcd registry return one from their FleetStore methods;
// services do not need to import it.
//
// etcd exposes no clock, so Time returns fleet.ErrNoStoreTime and the
// process's offset comes from the agent's fleet.TierReport.
//
// # Failure modes
//
// A beat that cannot reach etcd leaves the lease to expire: the heartbeat
// disappears after at most its TTL. A lease that expired meanwhile is
// granted anew by the next beat.
package etcdstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument/fleet"
)

// Store is a fleet.Store on one etcd cluster.
type Store struct {
	c  *clientv3.Client
	id string

	mu    sync.Mutex
	lease clientv3.LeaseID
	ttl   int64

	noSwap atomic.Bool // a Put with its previous key-value was refused: Swap is Put (see Swap)
}

// New returns the fleet store of c.
func New(c *clientv3.Client) *Store {
	eps := slices.Clone(c.Endpoints())
	slices.Sort(eps)
	return &Store{c: c, id: "etcd://" + strings.Join(eps, ",")}
}

// ID implements fleet.Store.
func (s *Store) ID() string { return s.id }

// Backend implements fleet.Store.
func (s *Store) Backend() string { return "etcd" }

// Put implements fleet.Store: it keeps the heartbeat's lease alive (granting
// one when there is none, or when it expired or its TTL changed) and writes
// the value on it.
func (s *Store) Put(ctx context.Context, instance string, value []byte, ttl time.Duration) error {
	_, err := s.put(ctx, instance, value, ttl)
	return err
}

// Swap implements fleet.Swapper: Put, returning the value the write
// replaced (its previous key-value). The previous key-value needs read
// permission on the key: a user that may only write it is refused
// (permission denied), and from then on this store writes with Put and
// returns no previous value. Its heartbeat is what matters; the previous
// value only finds siblings and other processes under this instance name.
func (s *Store) Swap(ctx context.Context, instance string, value []byte, ttl time.Duration) ([]byte, error) {
	if !s.noSwap.Load() {
		resp, err := s.put(ctx, instance, value, ttl, clientv3.WithPrevKV())
		if err == nil && resp.PrevKv != nil {
			return resp.PrevKv.Value, nil
		}
		if !errors.Is(err, rpctypes.ErrPermissionDenied) {
			return nil, err
		}
		s.noSwap.Store(true)
	}
	return nil, s.Put(ctx, instance, value, ttl)
}

func (s *Store) put(ctx context.Context, instance string, value []byte, ttl time.Duration, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	secs := int64((ttl + time.Second - 1) / time.Second)
	if s.lease != 0 && s.ttl == secs {
		_, err := s.c.KeepAliveOnce(ctx, s.lease)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.lease = 0
		} else if err != nil {
			return nil, err
		}
	}
	if s.lease == 0 || s.ttl != secs {
		g, err := s.c.Grant(ctx, secs)
		if err != nil {
			return nil, err
		}
		s.lease, s.ttl = g.ID, secs
	}
	resp, err := s.c.Put(ctx, fleet.EtcdKey(instance), string(value), append(opts, clientv3.WithLease(s.lease))...)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		s.lease = 0
	}
	return resp, err
}

// Delete implements fleet.Store: it revokes the lease, which deletes the
// key with it.
func (s *Store) Delete(ctx context.Context, instance string) error {
	s.mu.Lock()
	id := s.lease
	s.lease = 0
	s.mu.Unlock()
	if id != 0 {
		if _, err := s.c.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return err
		}
	}
	_, err := s.c.Delete(ctx, fleet.EtcdKey(instance))
	return err
}

// Time implements fleet.Store: etcd has no clock to read.
func (s *Store) Time(context.Context) (time.Time, error) { return time.Time{}, fleet.ErrNoStoreTime }

// TierReport implements fleet.Store.
func (s *Store) TierReport(ctx context.Context, instance string) ([]byte, error) {
	r, err := s.c.Get(ctx, fleet.TierEtcdKey(instance))
	if err != nil || len(r.Kvs) == 0 {
		return nil, err
	}
	return r.Kvs[0].Value, nil
}
