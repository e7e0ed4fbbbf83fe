package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/fence"
)

// A debit under a lock, written so that a holder that lost its lock cannot
// apply it after a newer holder's write. The table:
//
//	CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL,
//	                       fence BIGINT NOT NULL DEFAULT 0);
func ExampleSQL_Update() {
	var (
		ctx    context.Context
		db     *sql.DB
		locker instrument.Locker
	)
	accounts, err := fence.NewSQL("accounts", "id", "fence")
	if err != nil {
		panic(err)
	}
	lease, err := locker.Acquire(ctx, "lock:account:42", instrument.WithTTL(5*time.Second))
	if err != nil {
		return
	}
	defer lease.Release(context.WithoutCancel(ctx))
	err = accounts.Update(ctx, db, 42, lease.Fence(), "balance = balance - $1", 100)
	var stale *fence.StaleFenceError
	if errors.As(err, &stale) {
		fmt.Printf("superseded: stored fence %d, ours %d\n", stale.Stored, stale.Offered)
	}
}
