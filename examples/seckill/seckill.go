package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ErrSoldOut is returned by a Way's Deduct when the stock is smaller than the
// amount; nothing was taken.
var ErrSoldOut = errors.New("seckill: sold out")

// A Way is one method of deducting stock for one item. Every way is run on
// the same workload (Run) and checked the same way (Check).
type Way interface {
	// Name labels the way in the comparison table.
	Name() string
	// Setup makes stock the item's stock and forgets every earlier order.
	Setup(ctx context.Context, stock int64) error
	// Deduct takes amount from the stock once for requestID, or returns
	// ErrSoldOut and takes nothing.
	Deduct(ctx context.Context, amount int64, requestID string) error
	// Audit returns the stock left and the units sold according to the
	// way's own records (orders table, ledger, or the successes it counted),
	// after whatever settling the way needs (the quota way reconciles its
	// ledger here).
	Audit(ctx context.Context) (left, sold int64, err error)
}

// Workload is what every way is asked to do: Attempts deductions of Amount
// from a stock of Stock, by Workers goroutines at once.
type Workload struct {
	Stock    int64
	Attempts int
	Workers  int
	Amount   int64
	// Timeout bounds one deduction (rule 1 of the lock policy, and no
	// attempt hangs on a stuck server).
	Timeout time.Duration
}

// Result is one way's row of the comparison table.
type Result struct {
	Way                       string
	Deducted, SoldOut, Failed int
	Elapsed                   time.Duration
	P99                       time.Duration
	// Left and Sold are what the way's records say after the run.
	Left, Sold int64
	// Oversold is the units sold beyond the initial stock (must be 0).
	Oversold int64
	// Consistent is Left + Sold == initial stock, Left >= 0 and Sold equal
	// to the deductions that reported success.
	Consistent bool
	FirstErr   error
}

// PerSecond is the rate of successful deductions.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Deducted) / r.Elapsed.Seconds()
}

// Run sets the way up with w.Stock and runs w.Attempts deductions on
// w.Workers goroutines, each with its own request id, then audits.
func Run(ctx context.Context, way Way, w Workload) (Result, error) {
	if w.Stock < 0 || w.Attempts < 1 || w.Workers < 1 || w.Amount < 1 || w.Timeout <= 0 {
		return Result{}, fmt.Errorf("seckill: bad workload %+v: need stock >= 0, attempts, workers, amount >= 1 and a timeout", w)
	}
	if err := way.Setup(ctx, w.Stock); err != nil {
		return Result{}, fmt.Errorf("%s: setup: %w", way.Name(), err)
	}
	var (
		next                      atomic.Int64
		deducted, soldOut, failed atomic.Int64
		mu                        sync.Mutex
		firstErr                  error
		lat                       = make([][]time.Duration, w.Workers)
		wg                        sync.WaitGroup
	)
	// Request ids are remembered by the quota way for a day, across Setup:
	// a run of its own keeps them from replaying an earlier run's answers.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	start := time.Now()
	for g := range w.Workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(w.Attempts) {
					return
				}
				actx, cancel := context.WithTimeout(ctx, w.Timeout)
				t0 := time.Now()
				err := way.Deduct(actx, w.Amount, fmt.Sprintf("%s-%s-%d", way.Name(), run, i))
				lat[g] = append(lat[g], time.Since(t0))
				cancel()
				switch {
				case err == nil:
					deducted.Add(1)
				case errors.Is(err, ErrSoldOut):
					soldOut.Add(1)
				default:
					failed.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	r := Result{
		Way: way.Name(), Elapsed: time.Since(start), FirstErr: firstErr,
		Deducted: int(deducted.Load()), SoldOut: int(soldOut.Load()), Failed: int(failed.Load()),
	}
	r.P99 = p99(slices.Concat(lat...))
	left, sold, err := way.Audit(ctx)
	if err != nil {
		return r, fmt.Errorf("%s: audit: %w", way.Name(), err)
	}
	r.Left, r.Sold = left, sold
	r.Oversold = max(0, sold-w.Stock)
	r.Consistent = left >= 0 && left+sold == w.Stock && sold == int64(r.Deducted)*w.Amount
	return r, nil
}

func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[(len(d)*99+99)/100-1]
}
