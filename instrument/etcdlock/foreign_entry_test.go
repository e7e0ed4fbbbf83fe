package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestAcquire_AnotherWritersEntryUnderAQueueCountsAsAHolder: another
// writer's entry under a lock's queue prefix, "<key>\x00other", which is
// not an etcdlock queue entry (ParseQueueKey rejects it), is a holder of
// the lock to etcdlock, as any key under its prefix is to etcd's
// concurrency.Mutex: the queue is the whole prefix, compared and watched
// by create revision in one transaction, which cannot tell names apart.
// FailFast and Retry are refused while it is there; a waiter queues behind
// it (its entry written without acquired_at, so the Txn saw the queue not
// empty) in either wait mode, and is handed the lock when the entry is
// deleted. Decided in doc.go ("Failure modes"); the detectors say so.
func TestAcquire_AnotherWritersEntryUnderAQueueCountsAsAHolder(t *testing.T) {
	t.Parallel()
	for _, mode := range waitModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t, time.Minute)
			c := testenv.NewEtcd(t).Client(t)
			l := inWaitMode(newLocker(t, c), mode.max)
			const key = "lock:q"
			foreign := l.QueuePrefix(key) + "other"
			if _, _, ok := etcdlock.ParseQueueKey(etcdlock.DefaultPrefix, foreign); ok {
				t.Fatalf("%q reads as a queue entry: the test needs another writer's", foreign)
			}
			put, err := c.Put(ctx, foreign, "another writer's")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Acquire(ctx, key, instrument.FailFast()); !errors.Is(err, instrument.ErrNotAcquired) {
				t.Fatalf("FailFast with another writer's entry under the queue: %v, want ErrNotAcquired", err)
			}
			if _, err := l.Acquire(ctx, key, instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 2)); !errors.Is(err, instrument.ErrNotAcquired) {
				t.Fatalf("Retry with another writer's entry under the queue: %v, want ErrNotAcquired", err)
			}

			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			got := make(chan error, 1)
			go func() {
				lease, err := l.Acquire(wctx, key)
				if err == nil {
					err = lease.Release(context.Background())
				}
				got <- err
			}()
			// The waiter's entry: written without acquired_at by the Txn's
			// Else branch, which runs only when the queue is not empty.
			// FailFast and Retry wrote nothing: every put after the foreign
			// entry's is the waiter's.
			w := c.Watch(wctx, l.QueuePrefix(key), clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithRev(put.Header.Revision+1))
			var entry []byte
			for entry == nil {
				wr, ok := <-w
				if !ok || wr.Err() != nil {
					t.Fatalf("watch: %v", wr.Err())
				}
				for _, ev := range wr.Events {
					if _, _, ok := etcdlock.ParseQueueKey(etcdlock.DefaultPrefix, string(ev.Kv.Key)); ok {
						entry = ev.Kv.Value
					}
				}
			}
			if h := etcdlock.DecodeValue(entry); h.Foreign || !h.AcquiredAt.IsZero() {
				t.Fatalf("the waiter's first entry %+v: want one queued behind the foreign entry (no acquired_at)", h)
			}
			if _, err := c.Delete(ctx, foreign); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("the waiter, once the foreign entry is deleted: %v", err)
			}
		})
	}
}
