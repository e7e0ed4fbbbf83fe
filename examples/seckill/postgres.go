package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schema: one row per item, and one row per sold order. The orders table is
// the ledger of every way that writes to PostgreSQL: its primary key is the
// request id, so a request is recorded at most once whatever retries it.
const schema = `
CREATE TABLE IF NOT EXISTS items (
	id      text PRIMARY KEY,
	stock   bigint NOT NULL,
	version bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS orders (
	request_id text PRIMARY KEY,
	item_id    text NOT NULL,
	amount     bigint NOT NULL CHECK (amount > 0)
);
CREATE INDEX IF NOT EXISTS orders_item ON orders (item_id);
`

// Migrate creates the tables if they do not exist.
func Migrate(ctx context.Context, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, schema)
	return err
}

// resetItem makes stock the item's stock and deletes its orders.
func resetItem(ctx context.Context, db *pgxpool.Pool, item string, stock int64) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM orders WHERE item_id = $1`, item); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO items (id, stock) VALUES ($1, $2)
			ON CONFLICT (id) DO UPDATE SET stock = excluded.stock, version = 0`, item, stock)
		return err
	})
}

// auditItem returns the item's stock column and the units its orders hold.
func auditItem(ctx context.Context, db *pgxpool.Pool, item string) (stock, sold int64, err error) {
	err = db.QueryRow(ctx, `SELECT i.stock, COALESCE((SELECT SUM(amount) FROM orders WHERE item_id = i.id), 0)::bigint
		FROM items i WHERE i.id = $1`, item).Scan(&stock, &sold)
	return stock, sold, err
}

// ForUpdate is the pessimistic way: a transaction locks the item's row
// (SELECT … FOR UPDATE), checks the stock, decrements it and records the
// order. Every deduction of one item waits for the one before it to commit.
type ForUpdate struct {
	DB   *pgxpool.Pool
	Item string
}

func (f *ForUpdate) Name() string { return "select-for-update" }

func (f *ForUpdate) Setup(ctx context.Context, stock int64) error {
	return resetItem(ctx, f.DB, f.Item, stock)
}

func (f *ForUpdate) Deduct(ctx context.Context, amount int64, requestID string) error {
	return pgx.BeginFunc(ctx, f.DB, func(tx pgx.Tx) error {
		var stock int64
		if err := tx.QueryRow(ctx, `SELECT stock FROM items WHERE id = $1 FOR UPDATE`, f.Item).Scan(&stock); err != nil {
			return err
		}
		if stock < amount {
			return ErrSoldOut // BeginFunc rolls back
		}
		if _, err := tx.Exec(ctx, `UPDATE items SET stock = stock - $2, version = version + 1 WHERE id = $1`, f.Item, amount); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO orders (request_id, item_id, amount) VALUES ($1, $2, $3)`, requestID, f.Item, amount)
		return err
	})
}

func (f *ForUpdate) Audit(ctx context.Context) (int64, int64, error) {
	return auditItem(ctx, f.DB, f.Item)
}

// Optimistic is the compare-and-swap way: read stock and version without a
// lock, then decrement only if the version is still the one read (and the
// stock still suffices), recording the order in the same statement. A lost
// race changes nothing and is retried after a jittered exponential backoff.
type Optimistic struct {
	DB   *pgxpool.Pool
	Item string
	// MinBackoff and MaxBackoff bound the wait after a lost race
	// (defaults 200µs and 20ms).
	MinBackoff, MaxBackoff time.Duration
}

func (o *Optimistic) Name() string { return "optimistic-version" }

func (o *Optimistic) Setup(ctx context.Context, stock int64) error {
	return resetItem(ctx, o.DB, o.Item, stock)
}

// casDeduct decrements and records the order in one statement: the order
// row exists exactly when the UPDATE matched.
const casDeduct = `
WITH u AS (
	UPDATE items SET stock = stock - $2, version = version + 1
	WHERE id = $1 AND version = $3 AND stock >= $2
	RETURNING id
)
INSERT INTO orders (request_id, item_id, amount) SELECT $4, id, $2 FROM u`

func (o *Optimistic) Deduct(ctx context.Context, amount int64, requestID string) error {
	lo, hi := o.MinBackoff, o.MaxBackoff
	if lo <= 0 {
		lo = 200 * time.Microsecond
	}
	if hi < lo {
		hi = max(lo, 20*time.Millisecond)
	}
	wait := lo
	for {
		var stock, version int64
		if err := o.DB.QueryRow(ctx, `SELECT stock, version FROM items WHERE id = $1`, o.Item).Scan(&stock, &version); err != nil {
			return err
		}
		if stock < amount {
			return ErrSoldOut
		}
		tag, err := o.DB.Exec(ctx, casDeduct, o.Item, amount, version, requestID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		// Someone else changed the row since we read it: back off (full
		// jitter, so the losers do not all come back at once) and re-read.
		t := time.NewTimer(rand.N(wait) + time.Microsecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("optimistic deduction gave up: %w", context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, hi)
	}
}

func (o *Optimistic) Audit(ctx context.Context) (int64, int64, error) {
	return auditItem(ctx, o.DB, o.Item)
}
