package workerid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// TestRedis_LeaseRenewsAcrossASlotMigration moves the slot of a held
// WorkerID (slot key, high-water mark, ID-space key: one hash tag) to
// another primary the way redis-cli --cluster reshard does, stopping with
// the slot key moved and the mark not: Redis refuses renew.lua and
// claim.lua (TRYAGAIN) until the migration ends. A second Registry's
// claim of that WorkerID must fail meanwhile, the holder's lease must
// survive the refused renewals (its validity does not grow, and it is
// renewed once the slot has moved), and after the migration the WorkerID
// is still the holder's alone.
func TestRedis_LeaseRenewsAcrossASlotMigration(t *testing.T) {
	t.Parallel()
	cl := testenv.NewRedisCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holderC := cl.Client(t)
	refused := make(chan struct{}, 1)
	holderC.AddHook(tryAgainHook{refused})
	newReg := func(c redis.UniversalClient) *workerid.Registry {
		reg, err := workerid.NewRedis(c, workerid.WithTTL(900*time.Millisecond), workerid.WithIdentity("auth-6", ""), workerid.WithoutHeartbeat())
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	a, err := newReg(holderC).Claim(ctx, "auth")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(context.Background())
	other := newReg(cl.Client(t))

	key := workerid.SlotKey(workerid.DefaultKeyPrefix, a.WorkerID())
	m, err := cl.BeginKeyMigration(key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Finish(10) }()
	if err := m.Move(key); err != nil {
		t.Fatal(err)
	}
	if b, err := other.Claim(ctx, "auth"); err == nil {
		_ = b.Release(ctx)
		t.Fatalf("WorkerID %d claimed by a second Registry while the first holds it (slot half-migrated)", b.WorkerID())
	}
	select {
	case <-refused:
	case <-a.Done():
		t.Fatalf("the lease ended during the migration: %v", a.Err())
	case <-ctx.Done():
		t.Fatal("no renewal during the migration")
	}
	validBefore := a.State().ValidUntil
	if err := m.Finish(10); err != nil {
		t.Fatal(err)
	}
	for !a.State().ValidUntil.After(validBefore) {
		select {
		case <-a.Done():
			t.Fatalf("the lease ended after a refused renewal although the slot moved within its TTL: %v", a.Err())
		case <-ctx.Done():
			t.Fatal("no renewal after the migration")
		case <-time.After(20 * time.Millisecond):
		}
	}
	b, err := other.Claim(ctx, "auth")
	if err == nil {
		_ = b.Release(ctx)
		t.Fatalf("WorkerID %d claimed by a second Registry after the migration", b.WorkerID())
	}
	if !errors.Is(err, workerid.ErrCollision) && !errors.Is(err, workerid.ErrNoFreeSlot) {
		t.Fatalf("second claim after the migration: %v, want a collision", err)
	}
}

// tryAgainHook signals when a command through the client it hooks was
// answered TRYAGAIN.
type tryAgainHook struct{ seen chan<- struct{} }

func (h tryAgainHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h tryAgainHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if redis.HasErrorPrefix(err, "TRYAGAIN") {
			select {
			case h.seen <- struct{}{}:
			default:
			}
		}
		return err
	}
}
func (h tryAgainHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
