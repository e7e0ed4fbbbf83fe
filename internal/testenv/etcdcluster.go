package testenv

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Cluster members use a short heartbeat and election timeout so that a
// killed leader is replaced within about a second; they are still long
// enough for -race on two cores.
const (
	clusterTickMs     = 50
	clusterElectionMs = 500
)

// EtcdCluster is an embedded etcd cluster of n members on loopback ports.
type EtcdCluster struct {
	Members []*Etcd
	// PeerProxies, from NewEtcdClusterWithPeerProxies, stand in front of
	// each member's peer port: every raft connection another member dials to
	// member i goes through PeerProxies[i] (see Isolate).
	PeerProxies []*Proxy
}

// NewEtcdCluster starts an n-member etcd cluster for the test and stops it
// when the test ends. It fails the test if the cluster does not form.
func NewEtcdCluster(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	c, err := StartEtcdCluster(n)
	if err != nil {
		t.Fatalf("testenv: start etcd cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// StartEtcdCluster starts an n-member cluster and waits until every member
// serves requests. The caller must Close it.
func StartEtcdCluster(n int) (*EtcdCluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("testenv: etcd cluster needs at least 1 member, got %d", n)
	}
	var last error
	for range etcdStartTries {
		c, err := startEtcdCluster(n, false)
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, fmt.Errorf("testenv: etcd cluster did not form after %d tries: %w", etcdStartTries, last)
}

// NewEtcdClusterWithPeerProxies is NewEtcdCluster with a fault Proxy in
// front of every member's peer port, so a test can cut a member off from
// the others (Isolate).
func NewEtcdClusterWithPeerProxies(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	var c *EtcdCluster
	var last error
	for range etcdStartTries {
		if c, last = startEtcdCluster(n, true); last == nil {
			break
		}
	}
	if last != nil {
		t.Fatalf("testenv: start etcd cluster with peer proxies: %v", last)
	}
	t.Cleanup(c.Close)
	return c
}

// Isolate (on) blackholes the raft traffic other members send to member i
// over the connections they dialed to it: i stops receiving the leader's
// appends and heartbeats (or, if i leads, its followers' answers to
// requests they dialed for), so the others elect or keep a leader without
// it and it serves no linearizable request. Connections i dialed itself
// are not cut: a partition as the network between i and its peers' listen
// ports sees it. Off resets the proxied connections, so raft streams
// reconnect cleanly. It needs NewEtcdClusterWithPeerProxies.
func (c *EtcdCluster) Isolate(i int, on bool) {
	p := c.PeerProxies[i]
	p.Blackhole(on)
	if !on {
		p.Reset()
	}
}

func startEtcdCluster(n int, peerProxies bool) (*EtcdCluster, error) {
	c := &EtcdCluster{}
	token := ""
	var parts []string
	for i := range n {
		m, err := newEtcdMember("m"+strconv.Itoa(i), token, clusterTickMs, clusterElectionMs)
		if err != nil {
			c.Close()
			return nil, err
		}
		token = m.token
		c.Members = append(c.Members, m)
		if peerProxies {
			p, err := StartProxy(m.peerURL.Host)
			if err != nil {
				c.Close()
				return nil, err
			}
			c.PeerProxies = append(c.PeerProxies, p)
			m.advPeerURL = url.URL{Scheme: "http", Host: p.Addr()}
		}
		adv := m.advertisedPeer()
		parts = append(parts, m.name+"="+adv.String())
	}
	initial := strings.Join(parts, ",")
	for _, m := range c.Members {
		m.cluster = initial
	}
	// Members block in StartEtcd until they have contacted their peers'
	// listeners, so all of them start at once.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range c.Members {
		wg.Go(func() {
			m.mu.Lock()
			err := m.startLocked()
			m.mu.Unlock()
			if err == nil {
				err = m.waitReady(etcdReadyTimeout)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Endpoints returns the client URLs of all members, running or not.
func (c *EtcdCluster) Endpoints() []string {
	eps := make([]string, len(c.Members))
	for i, m := range c.Members {
		eps[i] = m.Endpoint()
	}
	return eps
}

// Client returns a client on all members that the test closes when it ends.
func (c *EtcdCluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return NewEtcdClient(t, c.Endpoints()...)
}

// Leader waits up to timeout for a running member to be leader and returns
// its index.
func (c *EtcdCluster) Leader(timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		for i, m := range c.Members {
			if m.IsLeader() {
				return i, nil
			}
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("testenv: no etcd leader within %v", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StopLeader stops the current leader and returns its index; Restart it
// with c.Members[i].Restart().
func (c *EtcdCluster) StopLeader() (int, error) {
	i, err := c.Leader(10 * time.Second)
	if err != nil {
		return -1, err
	}
	c.Members[i].Stop()
	return i, nil
}

// Close stops every member and removes their directories.
func (c *EtcdCluster) Close() {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Go(m.Close)
	}
	wg.Wait()
	for _, p := range c.PeerProxies {
		_ = p.Close()
	}
}
