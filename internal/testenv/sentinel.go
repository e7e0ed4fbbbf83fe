package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelMaster is the master name the Sentinel setup monitors.
const SentinelMaster = "lockgov"

// Sentinel is a primary, a replica of it, and one Sentinel watching them,
// with failover timings short enough for tests.
type Sentinel struct {
	Primary  *Redis
	Replica  *Redis
	Sentinel *Redis
	// Link carries the replication stream from the primary to the replica:
	// Blackhole it to make the primary accept writes the replica never sees
	// (the writes a failover loses).
	Link *Proxy
}

// NewSentinel starts the three processes for the test.
func NewSentinel(t testing.TB) *Sentinel {
	t.Helper()
	s, err := StartSentinel()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// StartSentinel starts a primary, a replica that has completed its initial
// sync, and a Sentinel (quorum 1, down-after 500ms) monitoring the primary.
func StartSentinel() (*Sentinel, error) {
	s := &Sentinel{}
	var err error
	if s.Primary, err = StartRedis(); err != nil {
		return nil, err
	}
	if s.Link, err = StartProxy(s.Primary.Addr()); err != nil {
		_ = s.Close()
		return nil, err
	}
	_, linkPort, _ := strings.Cut(s.Link.Addr(), ":")
	if s.Replica, err = StartRedis(WithRedisArgs("--replicaof", "127.0.0.1", linkPort)); err != nil {
		_ = s.Close()
		return nil, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := command(s.Replica.Addr(), "INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			_ = s.Close()
			return nil, fmt.Errorf("testenv: replica did not sync within 20s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	dir, err := os.MkdirTemp("", "testenv-sentinel-")
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf(`sentinel monitor %[1]s 127.0.0.1 %[2]d 1
sentinel down-after-milliseconds %[1]s 500
sentinel failover-timeout %[1]s 2000
sentinel parallel-syncs %[1]s 1
`, SentinelMaster, s.Primary.Port())
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		_ = s.Close()
		return nil, err
	}
	s.Sentinel, err = StartRedis(WithRedisConfigFile(conf), WithRedisArgs("--sentinel"))
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	// Sentinel learns of replicas from the primary's INFO; a failover before
	// it has seen the replica has no one to promote.
	for !s.knowsReplica() {
		if time.Now().After(deadline) {
			_ = s.Close()
			return nil, fmt.Errorf("testenv: sentinel did not discover the replica within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s, nil
}

// knowsReplica reports whether the Sentinel lists the replica as a healthy
// replica of the master.
func (s *Sentinel) knowsReplica() bool {
	v, err := roundTrip(s.Sentinel.Addr(), []string{"SENTINEL", "replicas", SentinelMaster})
	if err != nil {
		return false
	}
	replicas, _ := v.([]any)
	for _, r := range replicas {
		fields, _ := r.([]any)
		var port, flags string
		for i := 0; i+1 < len(fields); i += 2 {
			k, _ := fields[i].(string)
			val, _ := fields[i+1].(string)
			switch k {
			case "port":
				port = val
			case "flags":
				flags = val
			}
		}
		if port == strconv.Itoa(s.Replica.Port()) && flags == "slave" {
			return true
		}
	}
	return false
}

// MasterAddr asks the Sentinel which address it currently reports as the
// primary.
func (s *Sentinel) MasterAddr() (string, error) {
	out, err := commandArray(s.Sentinel.Addr(), "SENTINEL", "get-master-addr-by-name", SentinelMaster)
	if err != nil {
		return "", err
	}
	if len(out) != 2 {
		return "", fmt.Errorf("testenv: unexpected master address reply %q", out)
	}
	return out[0] + ":" + out[1], nil
}

// Close stops every process.
func (s *Sentinel) Close() error {
	var errs []error
	for _, r := range []*Redis{s.Sentinel, s.Replica, s.Primary} {
		if r != nil {
			errs = append(errs, r.Close())
		}
	}
	if s.Link != nil {
		errs = append(errs, s.Link.Close())
	}
	return errors.Join(errs...)
}
