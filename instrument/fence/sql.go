package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
)

// SQLExecer is what SQL needs of a connection: *sql.DB, *sql.Tx and
// *sql.Conn all have it.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ErrNoRow means a fenced UPDATE found no row with the key: nothing was
// written. Create rows (with fence 0) before fenced writes update them.
var ErrNoRow = errors.New("lockgov: fenced update: no row with that key")

// SQL writes fenced UPDATEs to one table whose rows carry a fence column
// (BIGINT NOT NULL DEFAULT 0), for PostgreSQL through database/sql (any
// driver that takes $n placeholders, such as pgx's stdlib). The pattern it
// runs, which code that cannot use it should copy:
//
//	UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence < $2
//
// One statement, so the check and the write are atomic under any isolation
// level: a concurrent UPDATE of the row waits for the row lock and then
// re-evaluates the WHERE clause against the committed row.
type SQL struct {
	update string // with %s for the caller's SET list
	read   string
	table  string
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// quoteIdent quotes a (possibly schema-qualified) identifier, refusing
// anything but plain names so no input reaches the statement unquoted.
func quoteIdent(what, s string) (string, error) {
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("fence: %s %q: want name or schema.name", what, s)
	}
	for i, p := range parts {
		if !identRE.MatchString(p) {
			return "", fmt.Errorf("fence: %s %q: want letters, digits and _ (not starting with a digit)", what, s)
		}
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, "."), nil
}

// NewSQL returns fenced writes to table, whose rows are found by keyColumn
// and carry their fence in fenceColumn. Names are plain identifiers
// (optionally schema.table), quoted in the statements.
func NewSQL(table, keyColumn, fenceColumn string) (*SQL, error) {
	t, err := quoteIdent("table", table)
	if err != nil {
		return nil, err
	}
	k, err := quoteIdent("key column", keyColumn)
	if err != nil {
		return nil, err
	}
	f, err := quoteIdent("fence column", fenceColumn)
	if err != nil {
		return nil, err
	}
	if strings.Contains(keyColumn, ".") || strings.Contains(fenceColumn, ".") {
		return nil, fmt.Errorf("fence: column names are not qualified: %q, %q", keyColumn, fenceColumn)
	}
	return &SQL{
		// %[1]s: the caller's SET list; %[2]d, %[3]d: fence and key placeholders.
		update: "UPDATE " + t + " SET %[1]s, " + f + " = $%[2]d WHERE " + k + " = $%[3]d AND " + f + " < $%[2]d",
		read:   "SELECT " + f + " FROM " + t + " WHERE " + k + " = $1",
		table:  table,
	}, nil
}

// Update sets the row with key to set (an SQL SET list such as
// "balance = balance - $1, note = $2", its placeholders numbered from $1 for
// args) and its fence to f, if and only if the row's fence is below f.
// It returns nil when the row was written, a *StaleFenceError when the
// row's fence is f or above, ErrNoRow when no row has the key, and the
// driver's error otherwise (the outcome is then unknown, and a retry with
// the same fence is safe).
func (s *SQL) Update(ctx context.Context, db SQLExecer, key any, f uint64, set string, args ...any) error {
	if f == 0 {
		return ErrNoFence
	}
	if f > math.MaxInt64 {
		return fmt.Errorf("fence: fence %d does not fit a BIGINT column", f)
	}
	if strings.TrimSpace(set) == "" {
		return fmt.Errorf("fence: empty SET list for %s", s.table)
	}
	n := len(args)
	q := fmt.Sprintf(s.update, set, n+1, n+2)
	all := append(append(make([]any, 0, n+2), args...), int64(f), key)
	res, err := db.ExecContext(ctx, q, all...)
	if err != nil {
		return fmt.Errorf("fence: update %s: %w", s.table, err)
	}
	rows, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: update %s: rows affected: %w", s.table, err)
	}
	if rows > 0 {
		return nil
	}
	// Refused or missing. Fences only grow, so the fence read now is at
	// least the one that refused the update: Stored >= Offered holds.
	var stored int64
	if err := db.QueryRowContext(ctx, s.read, key).Scan(&stored); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("fence: update %s key %v: %w", s.table, key, ErrNoRow)
		}
		return fmt.Errorf("fence: update %s: read stored fence: %w", s.table, err)
	}
	return &StaleFenceError{Store: "sql", Key: fmt.Sprint(key), Stored: uint64(stored), Offered: f}
}

// Fence reads the fence stored in the row with key (ErrNoRow if none).
func (s *SQL) Fence(ctx context.Context, db SQLExecer, key any) (uint64, error) {
	var stored int64
	if err := db.QueryRowContext(ctx, s.read, key).Scan(&stored); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("fence: %s key %v: %w", s.table, key, ErrNoRow)
		}
		return 0, fmt.Errorf("fence: read fence from %s: %w", s.table, err)
	}
	return uint64(stored), nil
}
