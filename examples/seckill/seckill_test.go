package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func openEnv(t *testing.T, conns int) *Env {
	t.Helper()
	redisAddr, pgDSN := servers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := Open(ctx, redisAddr, pgDSN, conns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Close() })
	return env
}

// items counts the items the tests of this process have made.
var items atomic.Int64

// itemName is base with a suffix no other test of this process uses: the
// servers are shared by every test (and every run of go test -count N), and
// an item's request ids would otherwise replay a previous run's answers.
func itemName(base string) string { return fmt.Sprintf("%s-%d", base, items.Add(1)) }

// ledgerEqualsRedis reports the ledger's sum and Redis's balance of the
// quota way, and whether loaded stock - ledger == Redis.
func ledgerEqualsRedis(t *testing.T, q *QuotaLedger, stock int64) (sold, left int64, equal bool) {
	t.Helper()
	ctx := context.Background()
	_, sold, err := auditItem(ctx, q.DB, q.Item)
	if err != nil {
		t.Fatal(err)
	}
	if left, err = q.Quota.Remaining(ctx, q.key()); err != nil {
		t.Fatal(err)
	}
	return sold, left, stock-sold == left
}

// TestWays_NeverOversellAndKeepStockConsistent runs every way on the same
// workload, twice as many attempts as stock from 16 buyers at once: each
// sells exactly the stock, refuses the rest, and its own records add up
// (left + sold == stock, sold == successful deductions, oversold 0).
func TestWays_NeverOversellAndKeepStockConsistent(t *testing.T) {
	env := openEnv(t, 16)
	w := Workload{Stock: 150, Attempts: 300, Workers: 16, Amount: 1, Timeout: 30 * time.Second}
	for _, way := range env.Ways("consistent") {
		t.Run(way.Name(), func(t *testing.T) {
			r, err := Run(context.Background(), way, w)
			if err != nil {
				t.Fatal(err)
			}
			if r.Failed != 0 {
				t.Fatalf("%d deductions failed, first: %v", r.Failed, r.FirstErr)
			}
			if r.Oversold != 0 || !r.Consistent || r.Deducted != 150 || r.SoldOut != 150 || r.Left != 0 || r.Sold != 150 {
				t.Fatalf("result %+v: want 150 deducted, 150 sold out, left 0, sold 150, oversold 0, consistent", r)
			}
		})
	}
}

// TestQuotaLedger_ReconcileMakesLedgerEqualRedis: the quota way with ledger
// batches failing (a PostgreSQL outage) ends with Redis ahead of the ledger;
// Reconcile writes the pending rows and the two agree. A deduction in Redis
// whose process died before the ledger (no pending row) is refunded, and a
// deduction Redis lost (a failover) is taken again; a retried request id
// deducts once.
func TestQuotaLedger_ReconcileMakesLedgerEqualRedis(t *testing.T) {
	env := openEnv(t, 8)
	ctx := context.Background()
	q := &QuotaLedger{DB: env.DB, Quota: env.Quota, Item: itemName("reconcile"), BatchSize: 4}
	q.insertHook = func(batch int) error {
		if batch%3 == 0 {
			return errors.New("injected: ledger insert failed")
		}
		return nil
	}
	const stock = 200
	if err := q.Setup(ctx, stock); err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var ids []string
	for i := range stock + 20 {
		id := fmt.Sprintf("%s-order-%d", q.Item, i) // order ids are global in the ledger
		err := q.Deduct(ctx, 1, id)
		switch {
		case i < stock && err != nil:
			t.Fatalf("deduction %d: %v", i, err)
		case i >= stock && !errors.Is(err, ErrSoldOut):
			t.Fatalf("deduction %d past the stock: %v, want ErrSoldOut", i, err)
		}
		ids = append(ids, id)
	}
	// A retried request id replays its first answer and takes nothing.
	if _, err := env.Quota.Deduct(ctx, q.key(), 1, ids[0]); err != nil {
		t.Fatalf("retry of %s: %v", ids[0], err)
	}
	q.Close() // flush what the writer can write
	if sold, left, eq := ledgerEqualsRedis(t, q, stock); eq || left != 0 {
		t.Fatalf("before reconciliation: ledger %d, Redis left %d; want Redis at 0 and the ledger short (batches failed)", sold, left)
	}

	rec, err := q.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sold, left, eq := ledgerEqualsRedis(t, q, stock); !eq || sold != stock || rec.Pending == 0 || rec.Refunded != 0 || rec.Retaken != 0 {
		t.Fatalf("after reconciliation: ledger %d, Redis left %d, %+v; want ledger %d, left 0, pending rows written", sold, left, rec, stock)
	}

	// A process that took units in Redis and died before its ledger row:
	// no order exists, so the units go back to the stock.
	if err := env.Quota.Add(ctx, q.key(), 5); err != nil { // top up first, so there is something to take
		t.Fatal(err)
	}
	if _, err := env.DB.Exec(ctx, `UPDATE items SET stock = stock + 5 WHERE id = $1`, q.Item); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Quota.Deduct(ctx, q.key(), 3, q.Item+"-crashed-order"); err != nil {
		t.Fatal(err)
	}
	if rec, err = q.Reconcile(ctx); err != nil || rec.Refunded != 3 {
		t.Fatalf("reconcile after a crash: %+v, %v; want 3 refunded", rec, err)
	}
	if sold, left, eq := ledgerEqualsRedis(t, q, stock+5); !eq || left != 5 {
		t.Fatalf("after the crash's reconciliation: ledger %d, Redis left %d; want 5 left", sold, left)
	}

	// A failover that lost 2 acknowledged deductions: the ledger sold them,
	// so they are taken again.
	if err := env.Quota.Add(ctx, q.key(), 2); err != nil {
		t.Fatal(err)
	}
	if rec, err = q.Reconcile(ctx); err != nil || rec.Retaken != 2 {
		t.Fatalf("reconcile after a lost deduction: %+v, %v; want 2 retaken", rec, err)
	}
	if sold, left, eq := ledgerEqualsRedis(t, q, stock+5); !eq || sold != stock || left != 5 {
		t.Fatalf("after the failover's reconciliation: ledger %d, Redis left %d; want %d and 5", sold, left, stock)
	}
	// Reconciling again changes nothing.
	if rec, err = q.Reconcile(ctx); err != nil || rec != (Reconciliation{}) {
		t.Fatalf("second reconciliation: %+v, %v; want nothing to do", rec, err)
	}
}

// TestRun_PrintsTheComparisonTable: the command's run prints one row per way
// and succeeds only when none oversold.
func TestRun_PrintsTheComparisonTable(t *testing.T) {
	redisAddr, pgDSN := servers(t)
	var out bytes.Buffer
	w := Workload{Stock: 40, Attempts: 80, Workers: 8, Amount: 1, Timeout: 30 * time.Second}
	if err := run(redisAddr, pgDSN, w, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"deductions/s", "p99", "oversold", "select-for-update", "optimistic-version", "lock+get+set", "quota-lua+ledger"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRun_RefusesABadWorkload: a workload without buyers or a timeout is a
// clear error before anything is written.
func TestRun_RefusesABadWorkload(t *testing.T) {
	for _, w := range []Workload{
		{Stock: 10, Attempts: 0, Workers: 1, Amount: 1, Timeout: time.Second},
		{Stock: 10, Attempts: 1, Workers: 0, Amount: 1, Timeout: time.Second},
		{Stock: -1, Attempts: 1, Workers: 1, Amount: 1, Timeout: time.Second},
		{Stock: 10, Attempts: 1, Workers: 1, Amount: 0, Timeout: time.Second},
		{Stock: 10, Attempts: 1, Workers: 1, Amount: 1},
	} {
		if _, err := Run(context.Background(), nil, w); err == nil || !strings.Contains(err.Error(), "bad workload") {
			t.Errorf("Run(%+v) = %v, want a bad-workload error", w, err)
		}
	}
}

// TestQuotaLedger_20000AttemptsOn10000Stock_LedgerEqualsRedis is issue 13's
// workload through the quota way: 64 goroutines make 20,000 attempts to
// deduct 1 from a stock of 10,000 while every fifth ledger batch fails.
// Exactly 10,000 succeed, Redis ends at 0, and after reconciliation the
// PostgreSQL ledger holds exactly those 10,000 orders.
func TestQuotaLedger_20000AttemptsOn10000Stock_LedgerEqualsRedis(t *testing.T) {
	env := openEnv(t, 64)
	q := &QuotaLedger{DB: env.DB, Quota: env.Quota, Item: itemName("must-show"), BatchSize: 64}
	q.insertHook = func(batch int) error {
		if batch%5 == 0 {
			return errors.New("injected: ledger insert failed")
		}
		return nil
	}
	w := Workload{Stock: 10_000, Attempts: 20_000, Workers: 64, Amount: 1, Timeout: 30 * time.Second}
	r, err := Run(context.Background(), q, w) // Audit reconciles
	if err != nil {
		t.Fatal(err)
	}
	if r.Failed != 0 || r.Deducted != 10_000 || r.SoldOut != 10_000 || r.Oversold != 0 || !r.Consistent {
		t.Fatalf("result %+v (first error %v): want 10,000 deducted, 10,000 sold out, oversold 0, consistent", r, r.FirstErr)
	}
	var rows int
	if err := env.DB.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE item_id = $1`, q.Item).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if sold, left, eq := ledgerEqualsRedis(t, q, 10_000); !eq || left != 0 || sold != 10_000 || rows != 10_000 {
		t.Fatalf("after reconciliation: ledger %d units in %d rows, Redis left %d; want 10,000, 10,000 and 0", sold, rows, left)
	}
}
