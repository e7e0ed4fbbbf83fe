package testenv

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisCluster is a real Redis Cluster of primaries (no replicas), each a
// private redis-server on free loopback ports, slots spread by
// redis-cli --cluster create.
type RedisCluster struct {
	Nodes []*Redis
	// Replicas are the replicas AddReplica added (none at the start);
	// Close stops them too.
	Replicas []*Redis
}

// NewRedisCluster starts a cluster of n primaries (n >= 3) for the test.
func NewRedisCluster(t testing.TB, n int) *RedisCluster {
	t.Helper()
	c, err := StartRedisCluster(n)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// StartRedisCluster starts n primaries with cluster mode on, creates the
// cluster and waits until every node reports cluster_state:ok.
func StartRedisCluster(n int) (*RedisCluster, error) {
	if n < 3 {
		return nil, fmt.Errorf("testenv: a Redis Cluster needs at least 3 primaries, got %d", n)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("testenv: redis-cli not installed (apt-get install -y redis-server): %w", err)
	}
	c := &RedisCluster{}
	for range n {
		bus, err := FreePort()
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		r, err := StartRedis(WithRedisArgs(
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
			"--cluster-port", strconv.Itoa(bus),
		))
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, r)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("testenv: redis-cli --cluster create: %w\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, r := range c.Nodes {
		for {
			info, err := command(r.Addr(), "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				return nil, fmt.Errorf("testenv: cluster not ok on %s within 30s: %v %q", r.Addr(), err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c, nil
}

// Addrs returns the nodes' addresses, the seed list for a cluster client.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, r := range c.Nodes {
		addrs[i] = r.Addr()
	}
	return addrs
}

// Close stops every node.
func (c *RedisCluster) Close() error {
	var errs []error
	for _, r := range append(c.Nodes[:len(c.Nodes):len(c.Nodes)], c.Replicas...) {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}
