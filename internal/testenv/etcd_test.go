package testenv

import (
	"context"
	"testing"
	"time"
)

func TestEtcd_ServesAndRestartsWithData(t *testing.T) {
	e := NewEtcd(t)
	c := e.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	e.Stop()
	if err := e.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	resp, err := c.Get(ctx, "k")
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get after restart: %v, want k=v", resp.Kvs)
	}
}

func TestEtcdCluster_ElectsNewLeaderWhenLeaderStops(t *testing.T) {
	cl := NewEtcdCluster(t, 3)
	c := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v1"); err != nil {
		t.Fatalf("put: %v", err)
	}
	old, err := cl.StopLeader()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "k", "v2"); err != nil {
		t.Fatalf("put with leader %d stopped: %v", old, err)
	}
	now, err := cl.Leader(10 * time.Second)
	if err != nil || now == old {
		t.Fatalf("leader after stop: %d, %v (old %d)", now, err, old)
	}
	if err := cl.Members[old].Restart(); err != nil {
		t.Fatalf("restart old leader: %v", err)
	}
}
