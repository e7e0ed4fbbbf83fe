package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/testenv"
)

const startBalance = 10_000

// setup starts Redis and PostgreSQL, creates the tables and opens account
// alice (and bob) with startBalance cents.
func setup(t *testing.T) (redisAddr, pgDSN string, db *pgxpool.Pool) {
	t.Helper()
	r, pg := testenv.NewRedis(t), testenv.NewPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := pgxpool.New(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO accounts VALUES ('alice', $1), ('bob', $1)`, startBalance); err != nil {
		t.Fatal(err)
	}
	return r.Addr(), pg.DSN(), db
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func pay(client *http.Client, base, account, key string, cents int64) (response, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/payments", bytes.NewReader(fmt.Appendf(nil, `{"amount_cents": %d}`, cents)))
	if err != nil {
		return response{}, err
	}
	req.Header.Set(AccountHeader, account)
	if key != "" {
		req.Header.Set(idempotency.Header, key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, body}, err
}

// ledger returns the account's payments and balance.
func ledger(t *testing.T, db *pgxpool.Pool, account string) (payments int, balance int64) {
	t.Helper()
	err := db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM payments WHERE account = $1), balance_cents
		FROM accounts WHERE id = $1`, account).Scan(&payments, &balance)
	if err != nil {
		t.Fatal(err)
	}
	return payments, balance
}

// TestPayments_ReplayedByteForByteAndScopedByAccount: a retry of a payment
// gets the first response byte for byte and charges once; another account
// using the same key makes its own payment and never sees alice's; a missing
// key is refused with 400 and charges nothing.
func TestPayments_ReplayedByteForByteAndScopedByAccount(t *testing.T) {
	redisAddr, _, db := setup(t)
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	store, err := idempotency.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer((&Server{DB: db, Store: store}).Handler())
	defer ts.Close()
	client := ts.Client()

	first, err := pay(client, ts.URL, "alice", "order-1", 700)
	if err != nil || first.status != http.StatusCreated {
		t.Fatalf("first payment: %d %s %v", first.status, first.body, err)
	}
	again, err := pay(client, ts.URL, "alice", "order-1", 700)
	if err != nil {
		t.Fatal(err)
	}
	if again.status != first.status || !bytes.Equal(again.body, first.body) ||
		again.header.Get("Date") != first.header.Get("Date") || again.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("retry answered %d %s (Date %q), want the first response %d %s (Date %q)",
			again.status, again.body, again.header.Get("Date"), first.status, first.body, first.header.Get("Date"))
	}
	if n, bal := ledger(t, db, "alice"); n != 1 || bal != startBalance-700 {
		t.Fatalf("alice: %d payments, balance %d; want 1 and %d", n, bal, startBalance-700)
	}

	bob, err := pay(client, ts.URL, "bob", "order-1", 700)
	if err != nil || bob.status != http.StatusCreated || bytes.Equal(bob.body, first.body) {
		t.Fatalf("bob with alice's key: %d %s %v; want a payment of his own", bob.status, bob.body, err)
	}
	var p Payment
	if err := json.Unmarshal(bob.body, &p); err != nil || p.Account != "bob" {
		t.Fatalf("bob's response %s: %v", bob.body, err)
	}

	if r, err := pay(client, ts.URL, "alice", "", 700); err != nil || r.status != http.StatusBadRequest {
		t.Fatalf("payment without a key: %d %v, want 400", r.status, err)
	}
	if r, err := pay(client, ts.URL, "alice", "order-1", 900); err != nil || r.status != http.StatusUnprocessableEntity {
		t.Fatalf("key reused for another amount: %d %v, want 422", r.status, err)
	}
	if n, bal := ledger(t, db, "alice"); n != 1 || bal != startBalance-700 {
		t.Fatalf("alice after the refused requests: %d payments, balance %d; want 1 and %d", n, bal, startBalance-700)
	}
}

// retryUntilDone resends the payment until the answer is not 409 (the dead
// attempt's lease has not run out yet) or the deadline passes.
func retryUntilDone(t *testing.T, base, account, key string, cents int64) response {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := pay(client, base, account, key, cents)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusConflict {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("still 409 after 60s: %s", r.body)
		}
		time.Sleep(50 * time.Millisecond) // polling the lease's end, not synchronising
	}
}

// TestPayment_KilledMidRequest_RetryCommitsOnce SIGKILLs the server while a
// payment is inside its transaction, and (second case) after COMMIT before
// the response. The client's retry with the same key, on a fresh server,
// gets 201 once the dead attempt's lease ends, and the account has exactly
// one payment and one debit: in the first case the transaction died with
// the process and the retry commits it; in the second the retry hits the
// unique constraint and answers with the committed payment.
func TestPayment_KilledMidRequest_RetryCommitsOnce(t *testing.T) {
	for _, tc := range []struct {
		point            string
		paymentsAtKill   int
		balanceAfterKill int64
	}{
		{"in-tx", 0, startBalance},
		{"after-commit", 1, startBalance - 2500},
	} {
		t.Run(tc.point, func(t *testing.T) {
			redisAddr, pgDSN, db := setup(t)
			doomed := startChild(t, redisAddr, pgDSN, tc.point)
			failed := make(chan error, 1)
			go func() {
				client := &http.Client{Timeout: 60 * time.Second}
				defer client.CloseIdleConnections()
				r, err := pay(client, "http://"+doomed.addr, "alice", "order-42", 2500)
				if err == nil {
					err = fmt.Errorf("got an answer %d %s from a server that should have died", r.status, r.body)
				} else {
					err = nil
				}
				failed <- err
			}()
			if line := doomed.next(t); line != "AT "+tc.point {
				t.Fatalf("child said %q, want AT %s", line, tc.point)
			}
			doomed.kill()
			if err := <-failed; err != nil {
				t.Fatal(err)
			}
			if n, bal := ledger(t, db, "alice"); n != tc.paymentsAtKill || bal != tc.balanceAfterKill {
				t.Fatalf("after the kill: %d payments, balance %d; want %d and %d", n, bal, tc.paymentsAtKill, tc.balanceAfterKill)
			}

			fresh := startChild(t, redisAddr, pgDSN, "")
			r := retryUntilDone(t, "http://"+fresh.addr, "alice", "order-42", 2500)
			var p Payment
			if r.status != http.StatusCreated || json.Unmarshal(r.body, &p) != nil || p.AmountCents != 2500 || p.BalanceAfterCents != startBalance-2500 {
				t.Fatalf("retry: %d %s; want 201 with the payment of 2500", r.status, r.body)
			}
			if n, bal := ledger(t, db, "alice"); n != 1 || bal != startBalance-2500 {
				t.Fatalf("after the retry: %d payments, balance %d; want exactly 1 and %d", n, bal, startBalance-2500)
			}
			// And from now on the key replays.
			again := retryUntilDone(t, "http://"+fresh.addr, "alice", "order-42", 2500)
			if again.status != r.status || !bytes.Equal(again.body, r.body) {
				t.Fatalf("second retry: %d %s, want the replay of %d %s", again.status, again.body, r.status, r.body)
			}
			if n, _ := ledger(t, db, "alice"); n != 1 {
				t.Fatalf("%d payments after the replay, want 1", n)
			}
		})
	}
}
