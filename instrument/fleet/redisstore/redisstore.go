// Package redisstore is the fleet.Store of a Redis deployment: heartbeats
// are SET with PX (three intervals) and GET, which returns the beat the
// write replaced (fleet.Swapper), the clock is read with TIME.
// redislock.Locker and workerid's Redis registry return one from their
// FleetStore methods; services do not need to import it.
//
// # Failure modes
//
// A failed write leaves the previous heartbeat to expire at its TTL. On a
// Cluster the heartbeat key lives on the primary of its slot and TIME is
// answered by whichever node the client picks: Cluster nodes are expected
// to run NTP like any host, and a node far off shows as an offset on every
// process that happens to sample it.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/fleet"
)

// Store is a fleet.Store on one Redis deployment.
type Store struct {
	c  redis.UniversalClient
	id string

	noSwap atomic.Bool // SET ... GET was refused: Swap is Put (see Swap)
}

// New returns the fleet store of c.
func New(c redis.UniversalClient) *Store {
	return &Store{c: c, id: identity(c)}
}

// identity names the deployment by its addresses, so that two clients of
// one Redis share one heartbeat; a client whose addresses say nothing (a
// Sentinel failover client) is its own identity.
func identity(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		if o := c.Options(); o.Addr != "" && o.Addr != "FailoverClient" {
			return fmt.Sprintf("redis://%s/%d", o.Addr, o.DB)
		}
	case *redis.ClusterClient:
		addrs := slices.Clone(c.Options().Addrs)
		slices.Sort(addrs)
		return "redis-cluster://" + strings.Join(addrs, ",")
	}
	return fmt.Sprintf("redis-client:%p", c)
}

// ID implements fleet.Store.
func (s *Store) ID() string { return s.id }

// Backend implements fleet.Store.
func (s *Store) Backend() string { return "redis" }

// Put implements fleet.Store with SET key value PX ttl.
func (s *Store) Put(ctx context.Context, instance string, value []byte, ttl time.Duration) error {
	return s.c.Set(ctx, fleet.RedisKey(instance), value, ttl).Err()
}

// Delete implements fleet.Store.
func (s *Store) Delete(ctx context.Context, instance string) error {
	return s.c.Del(ctx, fleet.RedisKey(instance)).Err()
}

// Time implements fleet.Store with TIME.
func (s *Store) Time(ctx context.Context) (time.Time, error) {
	return s.c.Time(ctx).Result()
}

// TierReport implements fleet.Store.
func (s *Store) TierReport(ctx context.Context, instance string) ([]byte, error) {
	b, err := s.c.Get(ctx, fleet.TierRedisKey(instance)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return b, err
}

// Swap implements fleet.Swapper with SET key value PX ttl GET (Redis 6.2 or
// later, as lockgov's lock scripts need). GET needs read access to the key:
// a user that may only write it (a Redis 7 %W~ key pattern) is refused
// (NOPERM), and from then on this store writes with Put and returns no
// previous value. Its heartbeat is what matters; the previous value only
// finds siblings and other processes under this instance name.
func (s *Store) Swap(ctx context.Context, instance string, value []byte, ttl time.Duration) ([]byte, error) {
	if !s.noSwap.Load() {
		prev, err := s.c.SetArgs(ctx, fleet.RedisKey(instance), value, redis.SetArgs{TTL: ttl, Get: true}).Bytes()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if err == nil || !redis.HasErrorPrefix(err, "NOPERM") {
			return prev, err
		}
		s.noSwap.Store(true)
	}
	return nil, s.Put(ctx, instance, value, ttl)
}
