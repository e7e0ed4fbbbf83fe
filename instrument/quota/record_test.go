package quota_test

import (
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument/quota"
)

// TestRecords_DistinctKeysAndIDsNeverShareOne: a request-id record is named
// after the bucket and the id; with '}' allowed in both, key "a}:d:b" with id
// "c" and key "a" with id "b}:d:c" once named the same record, and the second
// Deduct (or a Refund meeting a Deduct's record) answered from the first's
// record and changed nothing.
func TestRecords_DistinctKeysAndIDsNeverShareOne(t *testing.T) {
	t.Parallel()
	c := single(t)
	q := newQuota(t, c)
	ctx := timeout(t, 30*time.Second)
	for key, n := range map[string]int64{"a}:d:b": 10, "a": 10, "k}:r:x": 10, "k": 0} {
		if err := q.Set(ctx, key, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Deduct(ctx, "a}:d:b", 3, "c"); err != nil {
		t.Fatal(err)
	}
	rem, err := q.Deduct(ctx, "a", 3, "b}:d:c")
	if err != nil || rem != 7 {
		t.Errorf(`Deduct("a", 3, "b}:d:c") = %d, %v; want 7 (a new request on another key)`, rem, err)
	}
	if left, _ := q.Remaining(ctx, "a"); left != 7 {
		t.Errorf("Remaining(a) = %d after taking 3 of 10, want 7", left)
	}

	if _, err := q.Deduct(ctx, "k}:r:x", 4, "o1"); err != nil {
		t.Fatal(err)
	}
	rem, err = q.Refund(ctx, "k", 4, "x}:d:o1")
	if err != nil || rem != 4 {
		t.Errorf(`Refund("k", 4, "x}:d:o1") = %d, %v; want 4`, rem, err)
	}
	if left, _ := q.Remaining(ctx, "k"); left != 4 {
		t.Errorf("Remaining(k) = %d after a refund of 4 onto 0, want 4", left)
	}

	// An id with '}' is still one request: its retry replays.
	rem, err = q.Deduct(ctx, "a", 3, "b}:d:c")
	if err != nil || rem != 7 {
		t.Errorf("retry of the '}' id = %d, %v; want the first answer, 7", rem, err)
	}
	// Ids without '}' keep the record name they always had, so a retry
	// across an upgrade finds its record.
	if _, err := q.Deduct(ctx, "a", 1, "plain-1"); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, quota.DefaultPrefix+"{a}:d:plain-1").Result(); err != nil || n != 1 {
		t.Errorf("record of id plain-1: exists %d, %v; want the name bucket+\":d:\"+id", n, err)
	}
}
