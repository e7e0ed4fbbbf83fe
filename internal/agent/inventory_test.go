package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestScan_RedisCluster_ListsEveryPrimarysLocksWithoutCompanionKeys holds
// that the leader's inventory scans every primary, decodes holders with
// redislock's decoder, skips fence counters, and counts the keys it looked at.
func TestScan_RedisCluster_ListsEveryPrimarysLocksWithoutCompanionKeys(t *testing.T) {
	cl := testenv.NewRedisCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	defer c.Close()
	l, err := redislock.New(c, redislock.WithService("stock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 30
	for i := range n {
		lease, err := l.Acquire(ctx, "lock:sku:"+strconv.Itoa(i), instrument.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.Background())
	}
	cfg := testConfig("agent")
	for _, addr := range cl.Addrs() {
		cfg.Redis = append(cfg.Redis, "redis://"+addr+"?cluster=1")
	}
	a := start(t, cfg)
	var doc struct {
		Locks []Lock `json:"locks"`
	}
	waitFor(t, fmt.Sprintf("%d locks in /api/v1/locks", n), func() bool {
		_, body := get(t, a.URL()+"api/v1/locks")
		return json.Unmarshal([]byte(body), &doc) == nil && len(doc.Locks) >= n
	})
	if len(doc.Locks) != n {
		t.Errorf("%d locks listed, want %d (companion keys must not be listed)", len(doc.Locks), n)
	}
	for _, lk := range doc.Locks {
		if lk.Holder.Service != "stock" || lk.Fence == 0 || lk.TTL <= 0 || lk.Pattern == "" {
			t.Errorf("lock %+v", lk)
		}
	}
	if v := metric(t, a, "lockgov_agent_keys_scanned_total"); v == "" || v == "0" {
		t.Errorf("lockgov_agent_keys_scanned_total = %q", v)
	}
}

// TestScan_InventoryKeepsTheFirst1000AndSaysTruncated: with more locks than
// the record keeps, /api/v1/locks lists 1,000 and says it is truncated (the
// inventory stops reading there), while lockgov_agent_keys_scanned_total
// still counts every key of a scan (the leaked-lock detector's count).
func TestScan_InventoryKeepsTheFirst1000AndSaysTruncated(t *testing.T) {
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = maxRecordLocks + 500
	pipe := c.Pipeline()
	for i := range n {
		pipe.Set(ctx, "lock:order:"+strconv.Itoa(i), "a value of another library", time.Hour)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("agent")
	cfg.Redis = []string{"redis://" + r.Addr()}
	a := start(t, cfg)
	var doc struct {
		Locks     []Lock `json:"locks"`
		Truncated bool   `json:"truncated"`
	}
	// (A scan cut short by its 200ms timeout on a loaded machine lists
	// fewer: wait for one that was not.)
	waitFor(t, "a complete scan in /api/v1/locks", func() bool {
		_, body := get(t, a.URL()+"api/v1/locks")
		return json.Unmarshal([]byte(body), &doc) == nil && len(doc.Locks) >= maxRecordLocks && doc.Truncated
	})
	if len(doc.Locks) != maxRecordLocks {
		t.Errorf("%d locks listed, want %d", len(doc.Locks), maxRecordLocks)
	}
	// A full scan was published, so at least n keys were counted (a scan
	// cut short by its timeout counts what it read, too).
	v, err := strconv.ParseFloat(metric(t, a, "lockgov_agent_keys_scanned_total"), 64)
	if err != nil || v < n {
		t.Errorf("lockgov_agent_keys_scanned_total = %v (%v), want at least %d", v, err, n)
	}
}

// etcdlockEntry is the etcd key of etcdlock's entry for key under lease
// (etcdlock's layout: "prefix key NUL lease").
func etcdlockEntry(key string, lease int) string {
	return fmt.Sprintf("%s%s\x00%016x", etcdlock.DefaultPrefix, key, lease)
}

// TestInventory_Etcd_StreamsLocksInKeyOrderAcrossPages: the etcd inventory
// reads one lock key at a time (no map of every key) and still lists each
// lock once, in key order, across range pages, with the entry of the lowest
// create revision as holder and the rest as waiters, a key that is a prefix
// of another apart from it.
func TestInventory_Etcd_StreamsLocksInKeyOrderAcrossPages(t *testing.T) {
	e := testenv.NewEtcd(t)
	ec := testenv.NewEtcdClient(t, e.Endpoints()...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 2*scanBatch + 10 // three range pages
	var ops []clientv3.Op
	flush := func() {
		if _, err := ec.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
		ops = ops[:0]
	}
	for i := range n {
		ops = append(ops, clientv3.OpPut(etcdlockEntry(fmt.Sprintf("lock:k%04d", i), 1), `{"service":"bulk"}`))
		if len(ops) == 100 {
			flush()
		}
	}
	flush()
	// lock:a: the holder is the entry put first, whatever its lease ID.
	for _, put := range []struct {
		lease   int
		service string
	}{{9, "first"}, {2, "second"}, {5, "third"}} {
		if _, err := ec.Put(ctx, etcdlockEntry("lock:a", put.lease), `{"service":"`+put.service+`"}`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ec.Put(ctx, etcdlockEntry("lock:a/b", 1), `{"service":"nested"}`); err != nil {
		t.Fatal(err)
	}
	in, err := OpenInventory(nil, e.Endpoints(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var got []Lock
	if err := in.List(ctx, func(l Lock) bool { got = append(got, l); return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != n+2 {
		t.Fatalf("%d locks, want %d", len(got), n+2)
	}
	for i := 1; i < len(got); i++ {
		if got[i-1].Key >= got[i].Key {
			t.Fatalf("not in key order: %q then %q", got[i-1].Key, got[i].Key)
		}
	}
	a, ab := got[0], got[1]
	if a.Key != "lock:a" || a.Holder.Service != "first" || a.Waiters != 2 || !a.Immortal() {
		t.Errorf("lock:a = %+v, want held by first with 2 waiters, no TTL", a)
	}
	if ab.Key != "lock:a/b" || ab.Holder.Service != "nested" || ab.Waiters != 0 {
		t.Errorf("lock:a/b = %+v", ab)
	}
	shown, err := in.Show(ctx, "lock:a")
	if err != nil || len(shown) != 1 || shown[0].Holder.Service != "first" || shown[0].Waiters != 2 {
		t.Errorf("Show(lock:a) = %+v, %v", shown, err)
	}
}

// TestInventory_ShowRefusesAnEmptyKey: the empty key names no lock. On
// etcd a range over the lock prefix plus "" is every lock: Show("") must
// not answer with another key's lock, on either backend.
func TestInventory_ShowRefusesAnEmptyKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := testenv.NewEtcd(t)
	l, err := etcdlock.New(e.Client(t), etcdlock.WithService("billing"))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.Acquire(ctx, "lock:order:42", instrument.WithTTL(30*time.Second), instrument.FailFast())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	r := testenv.NewRedis(t)
	in, err := OpenInventory([]string{"redis://" + r.Addr()}, e.Endpoints(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	shown, err := in.Show(ctx, "")
	if err == nil || !strings.Contains(err.Error(), "empty") || len(shown) != 0 {
		t.Errorf(`Show("") = %+v, %v; want no lock and an error saying the key is empty`, shown, err)
	}
	if shown, err := in.Show(ctx, "lock:order:42"); err != nil || len(shown) != 1 {
		t.Errorf("Show(lock:order:42) = %+v, %v", shown, err)
	}
}

// TestInventory_Etcd_AnEntryOfAnotherWriterIsListedAndShownByItsFindingsKey:
// an entry another writer put under the lock prefix (not etcdlock's "key NUL
// lease" layout) is a lock of its own to the detectors, named by its whole
// etcd key: the immortal finding's key, the key remediation deletes. The
// inventory behind /api/v1/locks and `lockgov locks` skipped it: the console
// had no row (and no delete button) for the lock its finding named, and
// `lockgov locks show KEY` said there was none. It is listed and shown by
// that key now, with its lease's TTL when it has one, and etcdlock's locks
// around it keep their holders and waiters.
func TestInventory_Etcd_AnEntryOfAnotherWriterIsListedAndShownByItsFindingsKey(t *testing.T) {
	e := testenv.NewEtcd(t)
	ec := testenv.NewEtcdClient(t, e.Endpoints()...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	foreign := etcdlock.DefaultPrefix + "orders/42"
	odd := etcdlock.DefaultPrefix + "orders/43\x00not-a-lease" // a NUL, but not etcdlock's layout
	// Not etcdlock's layout either, and between orders/41's two entries in
	// key order: orders/41 stays one lock.
	between := etcdlockEntry("orders/41", 1) + "x"
	leased := etcdlock.DefaultPrefix + "orders/45"
	g, err := ec.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	for _, put := range []struct {
		key, value string
		opts       []clientv3.OpOption
	}{
		{etcdlockEntry("orders/41", 1), `{"service":"a"}`, nil},
		{etcdlockEntry("orders/41", 2), `{"service":"waiter"}`, nil},
		{foreign, `{"owner":"another library"}`, nil},
		{between, "z", nil},
		{odd, "x", nil},
		{etcdlockEntry("orders/44", 1), `{"service":"b"}`, nil},
		{leased, "y", []clientv3.OpOption{clientv3.WithLease(g.ID)}},
	} {
		if _, err := ec.Put(ctx, put.key, put.value, put.opts...); err != nil {
			t.Fatal(err)
		}
	}
	in, err := OpenInventory(nil, e.Endpoints(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	got := map[string]Lock{}
	if err := in.List(ctx, func(l Lock) bool {
		if _, dup := got[l.Key]; dup {
			t.Errorf("%q listed twice", l.Key)
		}
		got[l.Key] = l
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if l := got["orders/41"]; l.Holder.Service != "a" || l.Waiters != 1 {
		t.Errorf("orders/41 = %+v, want held by a with one waiter", l)
	}
	if l := got["orders/44"]; l.Holder.Service != "b" || l.Waiters != 0 {
		t.Errorf("orders/44 = %+v, want held by b", l)
	}
	for _, k := range []string{foreign, odd, between} {
		if l, ok := got[k]; !ok || !l.Immortal() || !l.Holder.Foreign || l.Waiters != 0 {
			t.Errorf("%q = %+v (listed %v), want an immortal lock with a foreign holder", k, l, ok)
		}
	}
	if l, ok := got[leased]; !ok || l.Immortal() || l.TTL <= 0 {
		t.Errorf("%q = %+v (listed %v), want its lease's TTL", leased, l, ok)
	}
	if len(got) != 6 {
		t.Errorf("%d locks, want 6: %v", len(got), got)
	}
	for _, k := range []string{foreign, odd} {
		if shown, err := in.Show(ctx, k); err != nil || len(shown) != 1 || shown[0].Key != k || !shown[0].Immortal() {
			t.Errorf("Show(%q) = %+v, %v; want the immortal entry", k, shown, err)
		}
	}
	if shown, err := in.Show(ctx, "orders/42"); err != nil || len(shown) != 0 {
		t.Errorf(`Show("orders/42") = %+v, %v; want none: the entry is named by its whole etcd key`, shown, err)
	}
}
