package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver, for tests only

	"github.com/lockgov/lockgov/instrument/fence"
	"github.com/lockgov/lockgov/internal/testenv"
)

func openPostgres(t *testing.T) *sql.DB {
	t.Helper()
	pg := testenv.NewPostgres(t)
	db, err := sql.Open("pgx", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, note TEXT NOT NULL DEFAULT '', fence BIGINT NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES (1, 100), (2, 100)`); err != nil {
		t.Fatal(err)
	}
	return db
}

func TestSQLUpdate_AppliesAboveAndRefusesAtOrBelowTheStoredFence(t *testing.T) {
	db := openPostgres(t)
	ctx := timeout(t, 30*time.Second)
	s, err := fence.NewSQL("accounts", "id", "fence")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, db, 1, 10, "balance = balance - $1, note = $2", 5, "first"); err != nil {
		t.Fatalf("fence 10 over 0: %v", err)
	}
	for _, f := range []uint64{10, 9, 1} {
		err := s.Update(ctx, db, 1, f, "balance = balance - $1", 50)
		var se *fence.StaleFenceError
		if !errors.Is(err, fence.ErrStaleFence) || !errors.As(err, &se) {
			t.Fatalf("fence %d after 10: %v, want ErrStaleFence", f, err)
		}
		if se.Stored != 10 || se.Offered != f || se.Store != "sql" || se.Key != "1" {
			t.Fatalf("fence %d: %+v, want Stored 10 Offered %d", f, se, f)
		}
	}
	if err := s.Update(ctx, db, 1, 11, "note = $1", "second"); err != nil {
		t.Fatalf("fence 11 over 10: %v", err)
	}
	var bal int64
	var note string
	if err := db.QueryRowContext(ctx, `SELECT balance, note FROM accounts WHERE id = 1`).Scan(&bal, &note); err != nil {
		t.Fatal(err)
	}
	if bal != 95 || note != "second" {
		t.Fatalf("row = %d %q, want 95 \"second\" (refused writes left nothing)", bal, note)
	}
	if got, err := s.Fence(ctx, db, 1); err != nil || got != 11 {
		t.Fatalf("Fence = %d, %v, want 11", got, err)
	}
	if got, err := s.Fence(ctx, db, 2); err != nil || got != 0 {
		t.Fatalf("untouched row's fence = %d, %v, want 0", got, err)
	}
}

func TestSQLUpdate_BadInputWritesNothing(t *testing.T) {
	db := openPostgres(t)
	ctx := timeout(t, 30*time.Second)
	s, err := fence.NewSQL("accounts", "id", "fence")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, db, 404, 5, "balance = 0"); !errors.Is(err, fence.ErrNoRow) {
		t.Fatalf("missing row: %v, want ErrNoRow", err)
	}
	if err := s.Update(ctx, db, 1, 0, "balance = 0"); !errors.Is(err, fence.ErrNoFence) {
		t.Fatalf("fence 0: %v, want ErrNoFence", err)
	}
	if err := s.Update(ctx, db, 1, math.MaxInt64+1, "balance = 0"); err == nil {
		t.Fatal("fence above MaxInt64 accepted")
	}
	if err := s.Update(ctx, db, 1, 5, "  "); err == nil {
		t.Fatal("empty SET accepted")
	}
	if got, _ := s.Fence(ctx, db, 1); got != 0 {
		t.Fatalf("fence %d after refused calls, want 0", got)
	}
	for _, bad := range [][3]string{
		{"accounts; DROP TABLE accounts", "id", "fence"},
		{"accounts", "id\"", "fence"},
		{"accounts", "id", ""},
		{"a.b.c", "id", "fence"},
		{"accounts", "x.id", "fence"},
	} {
		if _, err := fence.NewSQL(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("NewSQL(%q) accepted", bad)
		}
	}
	if _, err := fence.NewSQL("public.accounts", "id", "fence"); err != nil {
		t.Errorf("schema-qualified table refused: %v", err)
	}
}

// TestSQLUpdate_ConcurrentWritersOnlyTheHighestFenceWins: 16 writers with
// fences 1..16 race on one row inside transactions; whatever the order,
// the row ends with fence 16 and its writer's value, and every refusal
// reports a stored fence at or above the one offered.
func TestSQLUpdate_ConcurrentWritersOnlyTheHighestFenceWins(t *testing.T) {
	db := openPostgres(t)
	ctx := timeout(t, 60*time.Second)
	s, err := fence.NewSQL("accounts", "id", "fence")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for f := uint64(1); f <= 16; f++ {
		wg.Go(func() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer func() { _ = tx.Rollback() }()
			err = s.Update(ctx, tx, 2, f, "balance = $1", int64(f))
			var se *fence.StaleFenceError
			switch {
			case err == nil:
				if err := tx.Commit(); err != nil {
					t.Error(err)
				}
			case errors.As(err, &se):
				if se.Stored < f {
					t.Errorf("fence %d refused with stored %d < offered", f, se.Stored)
				}
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var bal, fn int64
	if err := db.QueryRowContext(ctx, `SELECT balance, fence FROM accounts WHERE id = 2`).Scan(&bal, &fn); err != nil {
		t.Fatal(err)
	}
	if bal != 16 || fn != 16 {
		t.Fatalf("row = balance %d fence %d, want 16 16", bal, fn)
	}
}

func timeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
