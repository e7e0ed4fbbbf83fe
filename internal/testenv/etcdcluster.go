package testenv

import (
	"errors"
	"fmt"
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
		c, err := startEtcdCluster(n)
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, fmt.Errorf("testenv: etcd cluster did not form after %d tries: %w", etcdStartTries, last)
}

func startEtcdCluster(n int) (*EtcdCluster, error) {
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
		parts = append(parts, m.name+"="+m.peerURL.String())
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
}
