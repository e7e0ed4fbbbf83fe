package testenv

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client options shared by NewRedisClient and (*RedisCluster).Client:
// context deadlines bound every call, reads allow a loaded 2-core machine,
// one retry, and a pool large enough for 64 concurrent goroutines.
const (
	clientDialTimeout = time.Second
	clientIOTimeout   = 5 * time.Second
	clientPoolSize    = 64
)

// NewRedisClient returns a client on addr that the test closes when it ends.
func NewRedisClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           clientDialTimeout,
		ReadTimeout:           clientIOTimeout,
		WriteTimeout:          clientIOTimeout,
		MaxRetries:            1,
		PoolSize:              clientPoolSize,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Client returns a client on this server that the test closes when it ends.
// With WithRedisTLS or WithRedisACLUser it connects over TLS with the client
// certificate and as testenv's administrator (every command and key).
func (r *Redis) Client(t testing.TB) *redis.Client {
	t.Helper()
	if r.sec != nil {
		c := redis.NewClient(r.ClientOptions(adminUser, r.sec.adminPassword))
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return NewRedisClient(t, r.Addr())
}

// Client returns a Cluster client on these nodes that the test closes when
// it ends.
func (c *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 c.Addrs(),
		ContextTimeoutEnabled: true,
		DialTimeout:           clientDialTimeout,
		ReadTimeout:           clientIOTimeout,
		WriteTimeout:          clientIOTimeout,
		MaxRetries:            1,
		PoolSize:              clientPoolSize,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}
