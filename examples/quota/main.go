// Command quota is the payment platform's scenario from the spec: every paid
// order deducts from its merchant's package quota, and PC, mini-program and
// OpenAPI orders for one merchant may arrive at the same time.
//
// The per-merchant lock lock:quota:{merchant_id} serialises the deductions
// of one merchant (not of all merchants); the deduction itself is
// instrument/quota's Deduct, one Lua script that checks the remainder and
// deducts (or returns quota.ErrInsufficient), keyed by the order id, so even
// a holder that lost its lock cannot drive the quota below zero and a
// retried order is deducted once. After the deduction the holder records
// the merchant's last settled order with a fenced write
// (instrument/fence/redisfence): a holder that lost its lock (paused past
// its TTL) and wakes up after the next holder wrote gets ErrStaleFence
// instead of overwriting the newer record. The lock is a
// governed redislock: it refuses calls without a deadline, renews itself,
// releases on panic, and counts everything in Prometheus metrics.
//
// Without -redis it starts a private redis-server on a free port (Debian's
// redis-server package must be installed; ./scripts/test installs it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fence"
	"github.com/lockgov/lockgov/instrument/fence/redisfence"
	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/policy"
)

// ErrQuotaNotEnough means the merchant's remaining quota is below the amount.
var ErrQuotaNotEnough = quota.ErrInsufficient

const policyYAML = `
version: 1
patterns:
  - pattern: "lock:quota:{merchant_id}"
    mode: enforce
    ttl: 5s
    max_ttl: 1m
    wait: {strategy: deadline}
`

func main() {
	addr := flag.String("redis", "", "Redis address (default: start a private redis-server)")
	merchants := flag.Int("merchants", 3, "merchants")
	orders := flag.Int("orders", 40, "orders per merchant, from three channels at once")
	initial := flag.Int64("quota", 100, "initial quota per merchant")
	flag.Parse()
	if err := run(*addr, *merchants, *orders, *initial); err != nil {
		fmt.Fprintln(os.Stderr, "quota:", err)
		os.Exit(1)
	}
}

func run(addr string, merchants, orders int, initial int64) error {
	if merchants < 1 || orders < 1 || initial < 0 {
		return fmt.Errorf("need merchants >= 1, orders >= 1, quota >= 0; got %d, %d, %d", merchants, orders, initial)
	}
	if addr == "" {
		srv, err := testenv.StartRedis()
		if err != nil {
			return err
		}
		defer srv.Close()
		addr = srv.Addr()
		fmt.Printf("started a private redis-server on %s\n", addr)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()

	pol, err := policy.Parse("quota-policy.yaml", []byte(policyYAML))
	if err != nil {
		return err
	}
	raw, err := redislock.New(rdb, redislock.WithService("billing"))
	if err != nil {
		return err
	}
	defer raw.Close() // its pub/sub connection is kept between waits
	reg := prometheus.NewRegistry()
	locker, err := instrument.NewGoverned(raw, instrument.WithPolicy(pol), instrument.WithRegisterer(reg))
	if err != nil {
		return err
	}

	q, err := quota.New(rdb, quota.WithRegisterer(reg))
	if err != nil {
		return err
	}
	fw, err := redisfence.New(rdb)
	if err != nil {
		return err
	}

	ctx := context.Background()
	for m := 1; m <= merchants; m++ {
		if err := q.Set(ctx, quotaKey(m), initial); err != nil {
			return fmt.Errorf("seed quota: %w", err)
		}
	}

	type outcome struct{ ok, refused int }
	results := make([]outcome, merchants+1)
	var mu sync.Mutex
	var wg sync.WaitGroup
	channels := []string{"pc", "miniprogram", "openapi"}
	for m := 1; m <= merchants; m++ {
		for o := 0; o < orders; o++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				octx, cancel := context.WithTimeout(ctx, 10*time.Second) // rule 1: a timeout
				defer cancel()
				amount := int64(1 + o%5)
				meta := instrument.WithMeta(map[string]string{"channel": channels[o%3]})
				err := settle(octx, locker, q, fw, m, amount, fmt.Sprintf("order-%d-%d", m, o), meta)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					results[m].ok++
				case errors.Is(err, ErrQuotaNotEnough):
					results[m].refused++
				case errors.Is(err, fence.ErrStaleFence):
					// Deducted (once, by order id), but a newer holder has
					// recorded its order since: this holder lost its lock.
					results[m].ok++
				default:
					fmt.Fprintf(os.Stderr, "merchant %d order %d: %v\n", m, o, err)
				}
			}()
		}
	}
	wg.Wait()

	for m := 1; m <= merchants; m++ {
		remain, err := q.Remaining(ctx, quotaKey(m))
		if err != nil {
			return err
		}
		fmt.Printf("merchant %d: %d orders deducted, %d refused (quota not enough), remaining quota %d\n",
			m, results[m].ok, results[m].refused, remain)
		if remain < 0 {
			return fmt.Errorf("merchant %d quota went negative: %d", m, remain)
		}
	}
	return printMetrics(reg)
}

func quotaKey(merchant int) string { return fmt.Sprintf("quota:%d", merchant) }

// lastOrderKey holds the merchant's last settled order, written fenced.
func lastOrderKey(merchant int) string { return fmt.Sprintf("quota:last-order:{%d}", merchant) }

// settle is one order under the merchant's lock: deduct, then record the
// order as the merchant's last with the lease's fence. Rules 2 and 3: the
// deferred Release runs on return and on panic; the span and the lock value
// carry the caller's trace.
func settle(ctx context.Context, locker instrument.Locker, q *quota.Quota, fw *redisfence.Writer, merchant int, amount int64, orderID string, opts ...instrument.AcquireOption) (err error) {
	lease, err := locker.Acquire(ctx, fmt.Sprintf("lock:quota:%d", merchant), opts...)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if rerr := lease.Release(rctx); rerr != nil && err == nil {
			err = rerr
		}
	}()
	// Work that must not run after a loss uses the lease's context.
	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer context.AfterFunc(lease.Context(), func() { stop(context.Cause(lease.Context())) })()
	if _, err := deduct(wctx, q, merchant, amount, orderID); err != nil {
		return err
	}
	return fw.Set(wctx, lastOrderKey(merchant), orderID, lease.Fence(), 0)
}

// deduct checks and deducts in one round trip, atomic in Redis, at most
// once per order id.
func deduct(ctx context.Context, q *quota.Quota, merchant int, amount int64, orderID string) (int64, error) {
	left, err := q.Deduct(ctx, quotaKey(merchant), amount, orderID)
	if err != nil {
		return 0, fmt.Errorf("merchant %d, amount %d: %w", merchant, amount, err)
	}
	return left, nil
}

// printMetrics prints the lock and quota metrics a Prometheus scrape would see.
func printMetrics(reg *prometheus.Registry) error {
	mfs, err := reg.Gather()
	if err != nil {
		return err
	}
	fmt.Println("\nlock and quota metrics (as scraped):")
	var b strings.Builder
	for _, mf := range mfs {
		if strings.HasSuffix(mf.GetName(), "_seconds") {
			continue // histograms are long; counts are enough here
		}
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			return err
		}
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			fmt.Println("  " + line)
		}
	}
	return nil
}
