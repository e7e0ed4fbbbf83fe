package quota_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestDeduct_AcrossASlotMigration moves the slot of a balance (the bucket
// and its request-id records: one hash tag) to another primary the way
// redis-cli --cluster reshard does, and deducts while it is half-migrated:
// with the bucket moved and a record not (and a new request, whose record
// does not exist yet), Redis refuses deduct.lua (TRYAGAIN) and nothing is
// deducted; a replay whose record and bucket are on one node answers from
// the record. After the migration every retry with the same request id
// deducts once: no unit deducted twice, none lost.
func TestDeduct_AcrossASlotMigration(t *testing.T) {
	t.Parallel()
	cl := testenv.NewRedisCluster(t, 3)
	c := cl.Client(t)
	q := newQuota(t, c)
	ctx := timeout(t, 30*time.Second)
	const key = "stock:{sku-9}"
	if err := q.Set(ctx, key, 10); err != nil {
		t.Fatal(err)
	}
	if rem, err := q.Deduct(ctx, key, 3, "before"); err != nil || rem != 7 {
		t.Fatalf("Deduct before: %d, %v", rem, err)
	}
	bucket := quota.DefaultPrefix + "{" + key + "}"
	m, err := cl.BeginKeyMigration(bucket)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Finish(10) }()

	// Nothing moved yet: the replay's record and the bucket are on the
	// source, which answers it.
	if rem, err := q.Deduct(ctx, key, 3, "before"); err != nil || rem != 7 {
		t.Fatalf("replay with the slot open: %d, %v", rem, err)
	}
	if err := m.Move(bucket); err != nil {
		t.Fatal(err)
	}
	// Split: the bucket on the target, the record on the source.
	for _, id := range []string{"before", "during"} {
		rem, err := q.Deduct(ctx, key, 2, id)
		switch {
		case err == nil && id == "during":
			t.Logf("Deduct %s with the bucket moved: ran (%d left)", id, rem)
		case err == nil:
			t.Fatalf("Deduct %s with another amount replayed %d instead of refusing", id, rem)
		case errors.Is(err, quota.ErrInsufficient):
			t.Fatalf("Deduct %s with the bucket moved: %v", id, err)
		default:
			t.Logf("Deduct %s with the bucket moved: %v", id, err)
		}
	}
	if err := m.Finish(10); err != nil {
		t.Fatal(err)
	}
	// The refused deduction deducted nothing, the replay nothing again.
	for range 2 {
		if rem, err := q.Deduct(ctx, key, 3, "before"); err != nil || rem != 7 {
			t.Fatalf("replay after the migration: %d, %v", rem, err)
		}
		if rem, err := q.Deduct(ctx, key, 2, "during"); err != nil || rem != 5 {
			t.Fatalf("retry of the refused deduction after the migration: %d, %v (want 5)", rem, err)
		}
	}
	if rem, err := q.Remaining(ctx, key); err != nil || rem != 5 {
		t.Fatalf("balance after the migration: %d, %v, want 5", rem, err)
	}
}
