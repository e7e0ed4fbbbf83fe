package testenv

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// AddReplica starts a redis-server with cluster mode on, joins it to the
// cluster (CLUSTER MEET) as a replica of primary (CLUSTER REPLICATE) and
// waits until its replication link is up. Close stops it with the
// cluster's nodes. Nodes stays the primaries the cluster was created with.
func (c *RedisCluster) AddReplica(primary *Redis) (*Redis, error) {
	bus, err := FreePort()
	if err != nil {
		return nil, err
	}
	r, err := StartRedis(WithRedisArgs(
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "2000",
		"--cluster-port", strconv.Itoa(bus),
		"--repl-diskless-sync-delay", "0",
	))
	if err != nil {
		return nil, err
	}
	c.Replicas = append(c.Replicas, r)
	primaryID, _, err := myself(primary)
	if err != nil {
		return nil, err
	}
	host, port, busPort, err := clusterAddr(primary)
	if err != nil {
		return nil, err
	}
	if _, err := command(r.Addr(), "CLUSTER", "MEET", host, port, busPort); err != nil {
		return nil, fmt.Errorf("testenv: CLUSTER MEET from %s: %w", r.Addr(), err)
	}
	if err := waitCluster(30*time.Second, "the new node to know its primary", func() bool {
		out, err := command(r.Addr(), "CLUSTER", "NODES")
		return err == nil && strings.Contains(out, primaryID)
	}); err != nil {
		return nil, err
	}
	if _, err := command(r.Addr(), "CLUSTER", "REPLICATE", primaryID); err != nil {
		return nil, fmt.Errorf("testenv: CLUSTER REPLICATE on %s: %w", r.Addr(), err)
	}
	if err := waitCluster(30*time.Second, "the replica to sync", func() bool {
		out, err := command(r.Addr(), "INFO", "replication")
		return err == nil && strings.Contains(out, "master_link_status:up")
	}); err != nil {
		return nil, err
	}
	return r, nil
}

// TakeOver promotes replica to a primary at once, without its primary's
// agreement or the other primaries' votes (CLUSTER FAILOVER TAKEOVER, what
// an operator runs when the primary is gone), and waits until it says it
// is one. Its primary's state that Redis does not replicate (an open slot
// migration's IMPORTING) stays behind.
func (c *RedisCluster) TakeOver(replica *Redis) error {
	if _, err := command(replica.Addr(), "CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
		return fmt.Errorf("testenv: CLUSTER FAILOVER TAKEOVER on %s: %w", replica.Addr(), err)
	}
	return waitCluster(30*time.Second, "the replica to be a primary", func() bool {
		out, err := command(replica.Addr(), "INFO", "replication")
		return err == nil && strings.Contains(out, "role:master")
	})
}

// clusterAddr is r's host, port and cluster bus port, from its own line of
// CLUSTER NODES ("host:port@bus").
func clusterAddr(r *Redis) (host, port, bus string, err error) {
	out, err := command(r.Addr(), "CLUSTER", "NODES")
	if err != nil {
		return "", "", "", err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(f[2], "myself") {
			continue
		}
		addr, bus, _ := strings.Cut(f[1], "@")
		bus, _, _ = strings.Cut(bus, ",")
		host, port, err := splitAddr(addr)
		if host == "" {
			host, _, _ = splitAddr(r.Addr())
		}
		return host, port, bus, err
	}
	return "", "", "", fmt.Errorf("testenv: %s: no myself line in CLUSTER NODES", r.Addr())
}

// waitCluster polls cond every 50 ms until it holds or d has passed.
func waitCluster(d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: not within %v: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}
