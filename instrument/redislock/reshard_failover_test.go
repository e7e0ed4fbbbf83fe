package redislock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestReshard_TheImportingNodeFailsOverWhileAHolderRenews (h111): a holder
// renews its lock while the lock's slot moves, the lock key already on the
// importing node; that node's replica takes over (CLUSTER FAILOVER
// TAKEOVER). Redis does not replicate a slot's IMPORTING state, so the
// promoted node does not serve the slot (it answers an ASKING client
// MOVED, back to the node the slot leaves, which answers ASK again) though
// it has the lock key: the holder's renewals fail, and the lock key
// expires there at its TTL. An operator then moves the slot on to the
// promoted node (redis-cli --cluster fix's way). The holder must keep the
// lock or observe its loss (its lease ended, ErrLockLost) before anyone
// else gets it: never two holders at once. A contender tries throughout,
// and gets it after the fix.
func TestReshard_TheImportingNodeFailsOverWhileAHolderRenews(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 3*time.Minute)
	cl := testenv.NewRedisCluster(t, 3)
	const key = "lock:reshard:{importer-fails-over}"
	owner, err := cl.KeyOwner(key)
	if err != nil {
		t.Fatal(err)
	}
	target := cl.OtherPrimary(owner)
	replica, err := cl.AddReplica(target)
	if err != nil {
		t.Fatal(err)
	}

	renewed := make(chan error, 256)
	hcfg, _ := instrument.ApplyAcquireOptions(instrument.WithTTL(2 * time.Second))
	hcfg.Observer = instrument.ObserverFuncs{OnRenewed: func(err error) {
		select {
		case renewed <- err:
		default:
		}
	}}
	holder, err := newLocker(t, cl.Client(t)).Acquire(ctx, key, instrument.WithConfig(hcfg))
	if err != nil {
		t.Fatal(err)
	}
	m, err := cl.BeginKeyMigration(key)
	if err != nil {
		t.Fatal(err)
	}
	if m.To != target {
		t.Fatalf("the slot moves to %s, not to the replicated %s", m.To.Addr(), target.Addr())
	}
	if err := m.Move(key); err != nil {
		t.Fatal(err)
	}
	// Renewals follow the ASK to the importing node: two in a row.
	for ok := 0; ok < 2; {
		select {
		case err := <-renewed:
			if err != nil {
				ok = 0
				continue
			}
			ok++
		case <-holder.Context().Done():
			t.Fatalf("the lease ended before the failover: %v", context.Cause(holder.Context()))
		case <-ctx.Done():
			t.Fatal("no renewal during the migration")
		}
	}
	// The replica has the lock key (MIGRATE's RESTORE and the renewals
	// replicate), then takes over.
	if n, err := testenv.NewRedisClient(t, target.Addr()).Wait(ctx, 1, 10_000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on the importing node: %d, %v", n, err)
	}
	if err := cl.TakeOver(replica); err != nil {
		t.Fatal(err)
	}
	promoted := testenv.NewRedisClient(t, replica.Addr())
	slot := strconv.Itoa(m.Slot)

	// A contender tries throughout; it must not get the lock while the
	// holder's lease lives.
	contender := newLocker(t, cl.Client(t))
	var got instrument.Lease
	try := func() bool {
		l, err := contender.Acquire(ctx, key, instrument.FailFast())
		if err != nil {
			return false
		}
		if holder.Context().Err() == nil {
			_ = l.Release(ctx)
			t.Fatalf("the contender got the lock (fence %d) while the holder's lease (fence %d) lives", l.Fence(), holder.Fence())
		}
		got = l
		return true
	}
	// Until the lock key has expired on the promoted node.
	testenv.WaitFor(t, time.Minute, "the lock key to expire on the promoted node", func() bool {
		if try() {
			return true
		}
		n, err := promoted.ClusterCountKeysInSlot(ctx, m.Slot).Result()
		return err == nil && n == 0
	})
	if got == nil {
		// The operator's fix: the slot moves on to the promoted node.
		fix, err := cl.BeginSlotMigration(m.Slot, replica)
		if err != nil {
			t.Fatalf("re-open the migration to the promoted node (slot %s): %v", slot, err)
		}
		if err := fix.Finish(10); err != nil {
			t.Fatalf("finish the migration to the promoted node: %v", err)
		}
		testenv.WaitFor(t, time.Minute, "the contender to get the lock after the fix", try)
	}
	defer got.Release(ctx)
	cause := context.Cause(holder.Context())
	if !errors.Is(cause, instrument.ErrLockLost) {
		t.Fatalf("the holder's lease ended with %v; want ErrLockLost", cause)
	}
	if got.Fence() <= holder.Fence() {
		t.Fatalf("fence %d after the failover, not above the holder's %d", got.Fence(), holder.Fence())
	}
	t.Logf("holder: %v; contender's fence %d", cause, got.Fence())
}
