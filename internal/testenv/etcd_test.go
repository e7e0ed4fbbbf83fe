package testenv

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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

// TestEtcd_StopDoesNotWaitForOpenWatches: Stop must end the member at
// once, open watch streams included, as a crashed or killed member would.
// embed's Close stops its gRPC server gracefully, which waits for every
// stream until etcd's request timeout (5 s + 2 elections) and serves them
// meanwhile: a single-member outage in a test could not be shorter than
// that, longer than etcdlock's default request timeout. The key watched
// here goes with a lease of 4 s granted just before the stop: a stopping
// server that still served the watch would deliver its expiry before Stop
// returned. After Restart the watch, which the client never closed, is
// served by the restarted member: the lease, given its whole TTL again,
// expires there and the deletion arrives.
func TestEtcd_StopDoesNotWaitForOpenWatches(t *testing.T) {
	e := NewEtcd(t)
	c := e.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := c.Grant(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	put, err := c.Put(ctx, "k", "v", clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	wch := c.Watch(ctx, "k", clientv3.WithRev(put.Header.Revision+1), clientv3.WithCreatedNotify())
	if wr := <-wch; !wr.Created {
		t.Fatalf("watch not created: %v", wr.Err())
	}

	e.Stop()
	select {
	case wr := <-wch:
		if len(wr.Events) > 0 {
			t.Fatalf("the stopping member served the open watch (%d events, the lease's expiry): Stop waited for the stream", len(wr.Events))
		}
	default:
	}
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "k"); err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	for {
		select {
		case wr, ok := <-wch:
			if !ok {
				t.Fatalf("the watch ended: %v", ctx.Err())
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return
				}
			}
		case <-ctx.Done():
			t.Fatal("the restarted member did not deliver the lease's expiry on the old watch")
		}
	}
}
