package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgov/lockgov/instrument/quota"
)

// QuotaLedger is the script way: the stock lives in Redis and one Lua call
// (instrument/quota's Deduct) checks and takes it atomically, at most once per
// request id. Each successful deduction is then written to PostgreSQL's
// orders table (the ledger, unique by request id) in batches, off the
// request's path. The ledger is the record of what was sold; Reconcile makes
// it and Redis agree afterwards.
//
// The item's row in items holds the stock loaded into Redis (it is not
// decremented): Redis's balance must equal it minus the ledger's sum.
type QuotaLedger struct {
	DB    *pgxpool.Pool
	Quota *quota.Quota
	Item  string
	// BatchSize bounds the rows of one ledger INSERT (default 512).
	BatchSize int
	// insertHook, when set (tests), runs before each ledger INSERT; an
	// error fails that batch as a PostgreSQL outage would.
	insertHook func(batch int) error

	mu      sync.Mutex
	pending map[string]int64 // deducted in Redis, not yet in the ledger
	queue   chan entry
	done    chan struct{}
	batches int
	epoch   string // names this Setup's corrections (request ids outlive Set)
}

type entry struct {
	requestID string
	amount    int64
}

func (q *QuotaLedger) Name() string { return "quota-lua+ledger" }

func (q *QuotaLedger) key() string { return "stock:" + q.Item }

// Setup stops a running ledger writer, loads stock into Redis and the items
// row, deletes the item's ledger, and starts the writer.
func (q *QuotaLedger) Setup(ctx context.Context, stock int64) error {
	q.Close()
	if err := resetItem(ctx, q.DB, q.Item, stock); err != nil {
		return err
	}
	if err := q.Quota.Set(ctx, q.key(), stock); err != nil {
		return err
	}
	q.mu.Lock()
	q.pending = map[string]int64{}
	q.mu.Unlock()
	q.epoch = strconv.FormatInt(time.Now().UnixNano(), 36)
	q.queue = make(chan entry, 8192)
	q.done = make(chan struct{})
	go q.writer(q.queue, q.done)
	return nil
}

// Deduct takes amount in Redis (one round trip) and queues the ledger row.
// It must not run concurrently with Setup, Close or Reconcile.
func (q *QuotaLedger) Deduct(ctx context.Context, amount int64, requestID string) error {
	_, err := q.Quota.Deduct(ctx, q.key(), amount, requestID)
	if errors.Is(err, quota.ErrInsufficient) {
		return ErrSoldOut
	}
	if err != nil {
		return err
	}
	q.mu.Lock()
	q.pending[requestID] = amount
	q.mu.Unlock()
	select {
	case q.queue <- entry{requestID, amount}:
	case <-ctx.Done():
		// Deducted and pending: Reconcile writes its ledger row.
	}
	return nil
}

// writer inserts queued rows in batches until the queue is closed. A batch
// that fails stays pending for Reconcile.
func (q *QuotaLedger) writer(queue <-chan entry, done chan<- struct{}) {
	defer close(done)
	size := q.BatchSize
	if size <= 0 {
		size = 512
	}
	batch := make([]entry, 0, size)
	for e := range queue {
		batch = append(batch[:0], e)
	fill:
		for len(batch) < size {
			select {
			case e, ok := <-queue:
				if !ok {
					break fill
				}
				batch = append(batch, e)
			default:
				break fill
			}
		}
		q.batches++
		if q.insertHook != nil && q.insertHook(q.batches) != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := q.insert(ctx, batch)
		cancel()
		if err != nil {
			continue
		}
		q.mu.Lock()
		for _, e := range batch {
			delete(q.pending, e.requestID)
		}
		q.mu.Unlock()
	}
}

// insert writes rows to the ledger; a request id already there is skipped,
// so a row written twice (a retried batch, Reconcile) counts once.
func (q *QuotaLedger) insert(ctx context.Context, batch []entry) error {
	ids := make([]string, len(batch))
	amounts := make([]int64, len(batch))
	for i, e := range batch {
		ids[i], amounts[i] = e.requestID, e.amount
	}
	_, err := q.DB.Exec(ctx, `INSERT INTO orders (request_id, item_id, amount)
		SELECT r, $1, a FROM unnest($2::text[], $3::bigint[]) AS t(r, a)
		ON CONFLICT (request_id) DO NOTHING`, q.Item, ids, amounts)
	return err
}

// Close flushes the queued ledger rows and stops the writer. Rows whose
// insert failed stay pending for Reconcile.
func (q *QuotaLedger) Close() {
	if q.queue == nil {
		return
	}
	close(q.queue)
	<-q.done
	q.queue, q.done = nil, nil
}

// Reconciliation is what Reconcile found and did.
type Reconciliation struct {
	// Pending is the deductions whose ledger row had not been written
	// (a failed batch); each was confirmed in Redis and written.
	Pending int
	// Refunded is the units Redis had taken without a ledger row (a process
	// that died between Deduct and the ledger): given back to the stock.
	Refunded int64
	// Retaken is the units the ledger holds that Redis had given back (a
	// failover that lost acknowledged deductions): taken again.
	Retaken int64
}

// Reconcile makes Redis and the ledger agree, the ledger being the record
// of what was sold: it flushes the writer, writes the pending rows (each
// confirmed by replaying its request id, which returns the first answer and
// deducts nothing), then corrects Redis's balance to the items row's stock
// minus the ledger's sum. Run it when no deductions are running.
func (q *QuotaLedger) Reconcile(ctx context.Context) (Reconciliation, error) {
	var rec Reconciliation
	q.Close()
	q.mu.Lock()
	batch := make([]entry, 0, len(q.pending))
	for id, a := range q.pending {
		batch = append(batch, entry{id, a})
	}
	q.mu.Unlock()
	for _, e := range batch {
		// The replay proves the deduction happened: a retried request id
		// returns its first answer. That holds within the quota's request
		// TTL (a day by default); reconcile well inside it, or a replay
		// becomes a new deduction.
		if _, err := q.Quota.Deduct(ctx, q.key(), e.amount, e.requestID); err != nil {
			return rec, fmt.Errorf("confirm pending %s: %w", e.requestID, err)
		}
	}
	if len(batch) > 0 {
		if err := q.insert(ctx, batch); err != nil {
			return rec, fmt.Errorf("write pending ledger rows: %w", err)
		}
		q.mu.Lock()
		for _, e := range batch {
			delete(q.pending, e.requestID)
		}
		q.mu.Unlock()
	}
	rec.Pending = len(batch)

	loaded, sold, err := auditItem(ctx, q.DB, q.Item)
	if err != nil {
		return rec, err
	}
	left, err := q.Quota.Remaining(ctx, q.key())
	if err != nil {
		return rec, err
	}
	// The request id names the correction, so a Reconcile retried after a
	// lost reply does not apply it twice.
	id := fmt.Sprintf("reconcile:%s:%s:%d:%d", q.Item, q.epoch, sold, left)
	switch want := loaded - sold; {
	case left > want:
		if _, err := q.Quota.Deduct(ctx, q.key(), left-want, id); err != nil {
			return rec, fmt.Errorf("take back %d units the ledger sold: %w", left-want, err)
		}
		rec.Retaken = left - want
	case left < want:
		if _, err := q.Quota.Refund(ctx, q.key(), want-left, id); err != nil {
			return rec, fmt.Errorf("refund %d units without a ledger row: %w", want-left, err)
		}
		rec.Refunded = want - left
	}
	return rec, nil
}

// Audit reconciles, then reports Redis's balance and the ledger's sum.
func (q *QuotaLedger) Audit(ctx context.Context) (int64, int64, error) {
	if _, err := q.Reconcile(ctx); err != nil {
		return 0, 0, err
	}
	_, sold, err := auditItem(ctx, q.DB, q.Item)
	if err != nil {
		return 0, 0, err
	}
	left, err := q.Quota.Remaining(ctx, q.key())
	return left, sold, err
}
