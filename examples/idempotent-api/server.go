package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgov/lockgov/instrument/idempotency"
)

// schema: the unique constraint on (account, idempotency_key) is the last line
// of defence. The Idempotency-Key middleware runs a request's handler once
// while its Redis record lives; when it cannot know (the process died after
// COMMIT and before the response was stored, so the key's lease expired and a
// retry runs the handler again), the second INSERT fails here and the handler
// answers with the payment the first attempt made.
const schema = `
CREATE TABLE IF NOT EXISTS accounts (
	id            text PRIMARY KEY,
	balance_cents bigint NOT NULL CHECK (balance_cents >= 0)
);
CREATE TABLE IF NOT EXISTS payments (
	id                  bigserial PRIMARY KEY,
	account             text NOT NULL REFERENCES accounts (id),
	idempotency_key     text NOT NULL,
	amount_cents        bigint NOT NULL CHECK (amount_cents > 0),
	balance_after_cents bigint NOT NULL,
	UNIQUE (account, idempotency_key)
);
`

// Migrate creates the tables if they do not exist.
func Migrate(ctx context.Context, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, schema)
	return err
}

// AccountHeader names the caller's account. It stands in for authentication:
// a real service takes the principal from a verified token.
const AccountHeader = "X-Account"

// Server is the payment API: POST /payments debits the caller's account.
type Server struct {
	DB    *pgxpool.Pool
	Store *idempotency.Store
	// hook, when set (tests), runs at the named points of a payment:
	// "in-tx" after the writes and before COMMIT, "after-commit" after
	// COMMIT and before the response.
	hook func(point string)
}

// PaymentRequest is the body of POST /payments.
type PaymentRequest struct {
	AmountCents int64 `json:"amount_cents"`
}

// Payment is the body of a successful POST /payments: the row written.
type Payment struct {
	ID                int64  `json:"payment_id"`
	Account           string `json:"account"`
	AmountCents       int64  `json:"amount_cents"`
	BalanceAfterCents int64  `json:"balance_after_cents"`
}

// Handler returns the API: POST /payments behind the idempotency middleware
// (a key is required, scoped by account), GET /healthz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	idem := idempotency.Middleware(s.Store, idempotency.RequireKey(),
		idempotency.WithPrincipal(func(r *http.Request) string { return r.Header.Get(AccountHeader) }))
	mux.Handle("POST /payments", idem(http.HandlerFunc(s.pay)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux
}

var errInsufficientFunds = errors.New("insufficient funds")

func (s *Server) pay(w http.ResponseWriter, r *http.Request) {
	account := r.Header.Get(AccountHeader)
	if account == "" {
		http.Error(w, AccountHeader+" header required", http.StatusUnauthorized)
		return
	}
	var req PaymentRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.AmountCents <= 0 {
		http.Error(w, `body must be {"amount_cents": n} with n > 0`, http.StatusBadRequest)
		return
	}
	// The middleware accepted the header as a token or an sf-string.
	key := strings.Trim(r.Header.Get(idempotency.Header), `"`)
	ctx := r.Context()

	p := Payment{Account: account, AmountCents: req.AmountCents}
	err := pgx.BeginFunc(ctx, s.DB, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `UPDATE accounts SET balance_cents = balance_cents - $2
			WHERE id = $1 AND balance_cents >= $2 RETURNING balance_cents`, account, req.AmountCents).Scan(&p.BalanceAfterCents)
		if errors.Is(err, pgx.ErrNoRows) {
			return errInsufficientFunds
		}
		if err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO payments (account, idempotency_key, amount_cents, balance_after_cents)
			VALUES ($1, $2, $3, $4) RETURNING id`, account, key, req.AmountCents, p.BalanceAfterCents).Scan(&p.ID); err != nil {
			return err
		}
		s.at("in-tx")
		return nil
	})
	if err == nil {
		s.at("after-commit")
	}
	switch {
	case isUniqueViolation(err):
		// This key's payment was committed by an attempt whose response
		// was never stored: answer with that payment, charge nothing.
		p, err = s.existing(ctx, account, key)
		if err != nil {
			http.Error(w, "payment lookup failed", http.StatusInternalServerError)
			return
		}
		if p.AmountCents != req.AmountCents {
			http.Error(w, "Idempotency-Key already used for another amount", http.StatusUnprocessableEntity)
			return
		}
	case errors.Is(err, errInsufficientFunds):
		http.Error(w, "insufficient funds", http.StatusPaymentRequired)
		return
	case err != nil:
		// 5xx: the middleware does not store it, so a retry runs again.
		http.Error(w, "payment failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/payments/%d", p.ID))
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(p)
}

func (s *Server) at(point string) {
	if s.hook != nil {
		s.hook(point)
	}
}

func (s *Server) existing(ctx context.Context, account, key string) (Payment, error) {
	p := Payment{Account: account}
	err := s.DB.QueryRow(ctx, `SELECT id, amount_cents, balance_after_cents FROM payments
		WHERE account = $1 AND idempotency_key = $2`, account, key).Scan(&p.ID, &p.AmountCents, &p.BalanceAfterCents)
	return p, err
}

// isUniqueViolation reports a duplicate key (SQLSTATE 23505).
func isUniqueViolation(err error) bool {
	var pe interface{ SQLState() string }
	return errors.As(err, &pe) && pe.SQLState() == "23505"
}
