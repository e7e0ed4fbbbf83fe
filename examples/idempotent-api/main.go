// Command idempotent-api is a payment endpoint made safe to retry:
// POST /payments debits the caller's account in PostgreSQL, behind
// instrument/idempotency's Middleware (Idempotency-Key header, keys scoped by
// account, responses replayed byte for byte), with a unique constraint on
// (account, idempotency key) as the last line of defence for the case the
// middleware cannot see: a process killed after COMMIT and before the
// response was stored.
//
//	curl -i -X POST localhost:8080/payments -H 'X-Account: alice' \
//	     -H 'Idempotency-Key: order-1' -d '{"amount_cents": 500}'
//
// Without -redis and -pg it starts a private redis-server and PostgreSQL on
// free ports and opens account alice with 100.00.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/testenv"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "listen address")
	redisAddr := flag.String("redis", "", "Redis address (default: start a private redis-server)")
	pgDSN := flag.String("pg", "", "PostgreSQL DSN (default: start a private PostgreSQL)")
	lease := flag.Duration("lease", 10*time.Second, "how long a request owns its key without renewing (a killed process blocks its key this long)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *listen, *redisAddr, *pgDSN, *lease, nil, nil); err != nil {
		fmt.Fprintln(os.Stderr, "idempotent-api:", err)
		os.Exit(1)
	}
}

// run serves the API on listen until ctx ends. ready, if not nil, receives
// the address listened on; hook is the Server's test hook.
func run(ctx context.Context, listen, redisAddr, pgDSN string, lease time.Duration, ready func(addr string), hook func(string)) error {
	demo := redisAddr == "" && pgDSN == ""
	if redisAddr == "" {
		srv, err := testenv.StartRedis()
		if err != nil {
			return err
		}
		defer srv.Close()
		redisAddr = srv.Addr()
	}
	if pgDSN == "" {
		pg, err := testenv.StartPostgres()
		if err != nil {
			return err
		}
		defer pg.Close()
		pgDSN = pg.DSN()
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	store, err := idempotency.New(rdb, idempotency.WithLease(lease))
	if err != nil {
		return err
	}
	db, err := pgxpool.New(ctx, pgDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := Migrate(ctx, db); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if demo {
		if _, err := db.Exec(ctx, `INSERT INTO accounts VALUES ('alice', 10000) ON CONFLICT DO NOTHING`); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           (&Server{DB: db, Store: store, hook: hook}).Handler(),
		ReadHeaderTimeout: 10 * time.Second,
	}
	if ready != nil {
		ready(ln.Addr().String())
	} else {
		fmt.Printf("listening on http://%s (POST /payments, headers X-Account and Idempotency-Key)\n", ln.Addr())
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
