package quota_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/internal/testenv"
)

func bucketKey(key string) string { return quota.DefaultPrefix + "{" + key + "}" }

// TestEviction_AnEvictedRecordDeductsARetryTwice: request-id records have a
// TTL (the request TTL) and balances have none, so under a volatile-* policy
// (ElastiCache's default volatile-lru) Redis evicts the records and keeps the
// balances: a retry of a deduction whose record was evicted is a new request
// and deducts again, and a retried refund credits again. The balance never
// goes below zero (no oversell); the at-most-once per request id is gone.
func TestEviction_AnEvictedRecordDeductsARetryTwice(t *testing.T) {
	t.Parallel()
	c := single(t)
	q := newQuota(t, c)
	ctx := timeout(t, 30*time.Second)
	if err := q.Set(ctx, "stock:sku-1", 10); err != nil {
		t.Fatal(err)
	}
	if left, err := q.Deduct(ctx, "stock:sku-1", 3, "order-1"); err != nil || left != 7 {
		t.Fatalf("Deduct = %d, %v; want 7", left, err)
	}
	if left, err := q.Refund(ctx, "stock:sku-1", 2, "refund-1"); err != nil || left != 9 {
		t.Fatalf("Refund = %d, %v; want 9", left, err)
	}
	b := bucketKey("stock:sku-1")
	testenv.Evict(t, c, "volatile-lru", b+":d:order-1", b+":r:refund-1")
	if n := c.Exists(ctx, b).Val(); n != 1 {
		t.Fatal("balance evicted under volatile-lru: it has no TTL, it should not be a candidate")
	}
	if left, err := q.Deduct(ctx, "stock:sku-1", 3, "order-1"); err != nil || left != 6 {
		t.Fatalf("retried Deduct after its record was evicted = %d, %v; want 6 (deducted again)", left, err)
	}
	if left, err := q.Refund(ctx, "stock:sku-1", 2, "refund-1"); err != nil || left != 8 {
		t.Fatalf("retried Refund after its record was evicted = %d, %v; want 8 (credited again)", left, err)
	}
}

// TestEviction_AnEvictedBalanceReadsAsSoldOut: under an allkeys-* policy
// (a shared cache Redis) the balance itself goes. Deduct then answers
// ErrInsufficient, indistinguishable from sold out, Remaining answers 0, and
// a Refund or Add creates a fresh balance of just its own amount: the units
// the evicted balance held are lost until Set writes the balance again.
func TestEviction_AnEvictedBalanceReadsAsSoldOut(t *testing.T) {
	t.Parallel()
	c := single(t)
	q := newQuota(t, c)
	ctx := timeout(t, 30*time.Second)
	if err := q.Set(ctx, "stock:sku-2", 10); err != nil {
		t.Fatal(err)
	}
	testenv.Evict(t, c, "allkeys-lru", bucketKey("stock:sku-2"))
	if _, err := q.Deduct(ctx, "stock:sku-2", 1, "order-2"); !errors.Is(err, quota.ErrInsufficient) {
		t.Fatalf("Deduct from an evicted balance = %v, want ErrInsufficient", err)
	}
	if left, err := q.Remaining(ctx, "stock:sku-2"); err != nil || left != 0 {
		t.Fatalf("Remaining of an evicted balance = %d, %v; want 0", left, err)
	}
	if left, err := q.Refund(ctx, "stock:sku-2", 2, "refund-2"); err != nil || left != 2 {
		t.Fatalf("Refund onto an evicted balance = %d, %v; want 2 (a fresh balance of the refund alone)", left, err)
	}
}
