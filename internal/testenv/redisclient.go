package testenv

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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

// NewLostReplyClient returns a client on addr, a Proxy's, for tests of a
// reply lost after the command ran (Proxy.DropNextReply): with 300 ms read
// and write timeouts and two retries, go-redis notices the lost reply and
// resends the command on another connection within the test, as it would in
// production after its own timeouts. The test closes it when it ends.
func NewLostReplyClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: 2,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
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

// RedisCPU is the CPU time redis-server has used so far, user + system
// (used_cpu_user and used_cpu_sys of INFO cpu): benchmarks report the
// server's CPU per operation from two readings, since on a machine where
// client and server share the cores throughput follows the sum of both.
func RedisCPU(ctx context.Context, c redis.UniversalClient) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
			continue
		}
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s=%q: %w", k, v, err)
		}
		total += time.Duration(secs * float64(time.Second))
	}
	return total, nil
}

// ServerCPU is RedisCPU for a test or benchmark: it fails tb when INFO cpu
// cannot be read.
func ServerCPU(tb testing.TB, c redis.UniversalClient) time.Duration {
	tb.Helper()
	d, err := RedisCPU(context.Background(), c)
	if err != nil {
		tb.Fatalf("testenv: INFO cpu: %v", err)
	}
	return d
}

// NewDeadlineClient returns a client of addr (usually a Proxy's) for tests of
// what a caller's deadline does: its socket deadlines come from the caller's
// context, capped at readTimeout for reads and writes; it never retries; and
// a new connection sends nothing before the caller's first command (RESP2,
// no CLIENT SETINFO), so a blackhole fails exactly that command. The test
// closes it when it ends.
func NewDeadlineClient(t testing.TB, addr string, readTimeout time.Duration) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, Protocol: 2, DisableIdentity: true,
		ReadTimeout: readTimeout, WriteTimeout: readTimeout, DialTimeout: time.Second, PoolSize: 128,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
