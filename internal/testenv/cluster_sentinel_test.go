package testenv

import (
	"strings"
	"testing"
	"time"
)

func TestRedisCluster_ThreePrimariesCoverAllSlots(t *testing.T) {
	c := NewRedisCluster(t, 3)
	info, err := command(c.Nodes[0].Addr(), "CLUSTER", "INFO")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:3"} {
		if !strings.Contains(info, want) {
			t.Errorf("CLUSTER INFO lacks %s:\n%s", want, info)
		}
	}
}

func TestSentinel_FailsOverWhenThePrimaryDies(t *testing.T) {
	s := NewSentinel(t)
	addr, err := s.MasterAddr()
	if err != nil {
		t.Fatal(err)
	}
	if addr != s.Primary.Addr() {
		t.Fatalf("sentinel reports %s, primary is %s", addr, s.Primary.Addr())
	}
	if err := s.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if addr, err = s.MasterAddr(); err == nil && addr == s.Replica.Addr() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover to %s within 30s (sentinel says %s, %v)", s.Replica.Addr(), addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
