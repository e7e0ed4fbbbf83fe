// Command seckill compares four ways of deducting inventory under a flash
// sale (seckill), on real PostgreSQL and Redis, with the same workload: many
// buyers at once, more attempts than stock, one hot item.
//
//   - select-for-update: a PostgreSQL transaction locks the item row,
//     checks, decrements and records the order.
//   - optimistic-version: read stock and version, then UPDATE … WHERE
//     version = $v AND stock >= $n (with the order insert in the same
//     statement), retrying with a jittered backoff when another buyer won.
//   - lock+get+set: a governed Redis lock (instrument.Govern over redislock)
//     around GET and SET of the stock.
//   - quota-lua+ledger: instrument/quota's Deduct, one Lua call that checks
//     and takes at most once per request id, with the orders written to a
//     PostgreSQL ledger (unique request id) in batches and reconciled after
//     the run.
//
// It prints deductions per second, the p99 of one deduction, and the audit of
// each way: units left plus units sold must equal the stock, oversold must be 0.
//
// Without -redis and -pg it starts a private redis-server and PostgreSQL
// cluster on free ports (Debian's redis-server and postgresql packages;
// ./scripts/test installs them; PostgreSQL runs as the postgres user).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/lockgov/lockgov/internal/testenv"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis address (default: start a private redis-server)")
	pgDSN := flag.String("pg", "", "PostgreSQL DSN (default: start a private PostgreSQL)")
	stock := flag.Int64("stock", 2000, "initial stock of the item")
	attempts := flag.Int("attempts", 0, "deduction attempts (default: twice the stock)")
	workers := flag.Int("workers", 64, "concurrent buyers")
	flag.Parse()
	if *attempts == 0 {
		*attempts = int(2 * *stock)
	}
	w := Workload{Stock: *stock, Attempts: *attempts, Workers: *workers, Amount: 1, Timeout: 10 * time.Second}
	if err := run(*redisAddr, *pgDSN, w, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "seckill:", err)
		os.Exit(1)
	}
}

func run(redisAddr, pgDSN string, w Workload, out io.Writer) error {
	if redisAddr == "" {
		srv, err := testenv.StartRedis()
		if err != nil {
			return err
		}
		defer srv.Close()
		redisAddr = srv.Addr()
		fmt.Fprintf(out, "started a private redis-server on %s\n", redisAddr)
	}
	if pgDSN == "" {
		pg, err := testenv.StartPostgres()
		if err != nil {
			return err
		}
		defer pg.Close()
		pgDSN = pg.DSN()
		fmt.Fprintf(out, "started a private PostgreSQL on port %d\n", pg.Port())
	}
	ctx := context.Background()
	env, err := Open(ctx, redisAddr, pgDSN, w.Workers)
	if err != nil {
		return err
	}
	defer env.Close()

	fmt.Fprintf(out, "workload: stock %d, %d attempts of %d unit(s), %d buyers at once\n\n", w.Stock, w.Attempts, w.Amount, w.Workers)
	var results []Result
	bad := false
	for _, way := range env.Ways("sku-1") {
		r, err := Run(ctx, way, w)
		if err != nil {
			return err
		}
		results = append(results, r)
		bad = bad || r.Oversold != 0 || !r.Consistent
	}
	PrintTable(out, results)
	if bad {
		return fmt.Errorf("a way oversold or left an inconsistent stock (see the table)")
	}
	return nil
}

// PrintTable writes the comparison table.
func PrintTable(out io.Writer, results []Result) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "way\tdeductions/s\tp99\tdeducted\tsold out\tfailed\tleft\tsold\toversold\tconsistent\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%v\t\n", r.Way, r.PerSecond(), r.P99.Round(10*time.Microsecond),
			r.Deducted, r.SoldOut, r.Failed, r.Left, r.Sold, r.Oversold, r.Consistent)
	}
	tw.Flush()
	for _, r := range results {
		if r.FirstErr != nil {
			fmt.Fprintf(out, "%s: first error: %v\n", r.Way, r.FirstErr)
		}
	}
}
