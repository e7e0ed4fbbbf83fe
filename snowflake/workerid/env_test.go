package workerid_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

const testTTL = 2 * time.Second

// store is one real backend for the table-driven tests.
type store struct {
	name string
	addr string
	// registry returns a Registry on a client of its own (closed by the test).
	registry func(t *testing.T, opts ...workerid.Option) *workerid.Registry
	down, up func(t *testing.T) // crash and restart the server
	// crashable is registry with a func that closes its client, as a crashed process would.
	crashable func(t *testing.T, opts ...workerid.Option) (*workerid.Registry, func())
}

func stores(t *testing.T) []store {
	return []store{redisStore(t), etcdStore(t)}
}

func redisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, ContextTimeoutEnabled: true})
}

// storeClient is the client of a store's registries: its server is killed, never paused
// or cut (a refused connection or EOF is seen at once), so its timeouts only have to be
// long enough for a loaded machine; 300ms was not, once (a claim's i/o timeout).
func storeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 2 * time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, ContextTimeoutEnabled: true})
}

func redisStore(t *testing.T) store {
	r := testenv.NewRedis(t)
	return store{
		name: "redis",
		addr: r.Addr(),
		registry: func(t *testing.T, opts ...workerid.Option) *workerid.Registry {
			c := storeClient(r.Addr())
			t.Cleanup(func() { _ = c.Close() })
			reg, err := workerid.NewRedis(c, append([]workerid.Option{workerid.WithTTL(testTTL)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return reg
		},
		crashable: func(t *testing.T, opts ...workerid.Option) (*workerid.Registry, func()) {
			c := storeClient(r.Addr())
			t.Cleanup(func() { _ = c.Close() })
			reg, err := workerid.NewRedis(c, append([]workerid.Option{workerid.WithTTL(testTTL)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return reg, func() { _ = c.Close() }
		},
		down: func(t *testing.T) {
			if err := r.Kill(); err != nil {
				t.Fatal(err)
			}
		},
		up: func(t *testing.T) {
			if err := r.Restart(); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func etcdClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
}

func etcdStore(t *testing.T) store {
	e := testenv.NewEtcd(t)
	return store{
		name: "etcd",
		addr: e.Endpoint(),
		registry: func(t *testing.T, opts ...workerid.Option) *workerid.Registry {
			c := e.Client(t)
			reg, err := workerid.NewEtcd(c, append([]workerid.Option{workerid.WithTTL(testTTL)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return reg
		},
		crashable: func(t *testing.T, opts ...workerid.Option) (*workerid.Registry, func()) {
			c, err := etcdClient(e.Endpoint())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			reg, err := workerid.NewEtcd(c, append([]workerid.Option{workerid.WithTTL(testTTL)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return reg, func() { _ = c.Close() }
		},
		down: func(*testing.T) { e.Stop() },
		up: func(t *testing.T) {
			if err := e.Restart(); err != nil {
				t.Fatal(err)
			}
		},
	}
}
