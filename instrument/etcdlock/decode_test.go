package etcdlock_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestDecodeValue_ReadsBackTheHolderThatWroteIt holds the round trip the
// agent depends on: the head entry under the key's queue prefix decodes to
// the holder that wrote it, and its create revision is the lease's fence.
func TestDecodeValue_ReadsBackTheHolderThatWroteIt(t *testing.T) {
	t.Parallel()
	cli := testenv.NewEtcd(t).Client(t)
	l := newLocker(t, cli, etcdlock.WithService("payments"), etcdlock.WithInstance("pod-3"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, "lock:order:o-1", instrument.WithTTL(6*time.Second), instrument.WithMeta(map[string]string{"order": "o-1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	pfx := l.QueuePrefix("lock:order:o-1")
	resp, err := cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("queue entries: %v, %v", resp, err)
	}
	kv := resp.Kvs[0]
	key, id, ok := etcdlock.ParseQueueKey(etcdlock.DefaultPrefix, string(kv.Key))
	if !ok || key != "lock:order:o-1" || id != kv.Lease {
		t.Fatalf("ParseQueueKey(%q) = %q, %x, %v; want the lock key and lease %x", kv.Key, key, id, ok, kv.Lease)
	}
	h := etcdlock.DecodeValue(kv.Value)
	if h.Foreign || h.Service != "payments" || h.Instance != "pod-3" || h.PID == 0 || h.TTL != 6*time.Second || h.Labels["order"] != "o-1" || h.QueuedAt.IsZero() {
		t.Fatalf("holder %+v from %s", h, kv.Value)
	}
	if uint64(kv.CreateRevision) != lease.Fence() {
		t.Fatalf("create revision %d, fence %d", kv.CreateRevision, lease.Fence())
	}
}

func TestDecodeValue_ForeignValuesAndKeys(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"", "locked", `{"owner":"x"}`, "\x00\x01"} {
		if h := etcdlock.DecodeValue([]byte(v)); !h.Foreign {
			t.Errorf("%q decoded as %+v, want foreign", v, h)
		}
	}
	for _, k := range []string{"/other/x\x000000000000000001", etcdlock.DefaultPrefix + "x", etcdlock.DefaultPrefix + "x\x00zz", etcdlock.DefaultPrefix + "\x000000000000000001",
		// After the fix of 6b8097e: a second NUL (the layout of a key
		// holding a NUL, which etcdlock never writes) and hex that is not
		// %016x's lower case.
		etcdlock.DefaultPrefix + "x\x000000000000000001\x000000000000000002", etcdlock.DefaultPrefix + "x\x00\x00000000000000001",
		etcdlock.DefaultPrefix + "x\x00ABCDEF0123456789"} {
		if _, _, ok := etcdlock.ParseQueueKey(etcdlock.DefaultPrefix, k); ok {
			t.Errorf("ParseQueueKey accepted %q", k)
		}
	}
}
