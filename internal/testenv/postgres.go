package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ErrPostgresNotInstalled is returned when no initdb is found under /usr/lib/postgresql.
// ./scripts/test installs the Debian package postgresql.
var ErrPostgresNotInstalled = errors.New("testenv: PostgreSQL is not installed (apt-get install -y postgresql)")

const postgresStartTries = 5

// Postgres is a private PostgreSQL server: its own cluster (initdb) in a temporary
// directory owned by the postgres user, listening on 127.0.0.1 on a free port, with fsync
// off. It never touches the system's server on 5432. Connect with DSN as user postgres
// (trust authentication on loopback).
type Postgres struct {
	bin  string // the server's bin directory
	dir  string
	port int

	mu      sync.Mutex
	running bool
}

// NewPostgres starts a PostgreSQL server for the test and removes it when the test ends.
// It fails the test if PostgreSQL cannot start.
func NewPostgres(t testing.TB) *Postgres {
	t.Helper()
	p, err := StartPostgres()
	if err != nil {
		t.Fatalf("testenv: start postgres: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// StartPostgres starts a private PostgreSQL server; the caller must Close it. As root it
// runs initdb and pg_ctl as the postgres user (runuser), since the server refuses root.
func StartPostgres() (*Postgres, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lockgov-postgres-")
	if err != nil {
		return nil, fmt.Errorf("testenv: postgres dir: %w", err)
	}
	p := &Postgres{bin: bin, dir: dir}
	if err := p.chown(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if out, err := p.run("initdb", "-D", p.data(), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("testenv: initdb: %w\n%s", err, out)
	}
	var last error
	for range postgresStartTries {
		if p.port, err = FreePort(); err != nil {
			break
		}
		if last = p.start(); last == nil {
			return p, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("testenv: postgres did not start after %d tries: %w", postgresStartTries, last)
}

func postgresBin() (string, error) {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(found) == 0 {
		return "", ErrPostgresNotInstalled
	}
	sort.Slice(found, func(i, j int) bool { // newest major version first
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[j]))))
		return vi > vj
	})
	return filepath.Dir(found[0]), nil
}

func (p *Postgres) data() string { return filepath.Join(p.dir, "data") }

// chown hands the directory to the postgres user when running as root.
func (p *Postgres) chown() error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("testenv: running as root needs the postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(p.dir, uid, gid); err != nil {
		return fmt.Errorf("testenv: chown postgres dir: %w", err)
	}
	return nil
}

// run runs a PostgreSQL tool as the postgres user when we are root.
func (p *Postgres) run(tool string, args ...string) ([]byte, error) {
	path := filepath.Join(p.bin, tool)
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = p.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd.CombinedOutput()
}

func (p *Postgres) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off", p.port, p.dir)
	out, err := p.run("pg_ctl", "-D", p.data(), "-o", opts, "-l", filepath.Join(p.dir, "postgres.log"), "-w", "-t", "30", "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(p.dir, "postgres.log"))
		return fmt.Errorf("pg_ctl start on port %d: %w\n%s\n%s", p.port, err, out, tail(string(log), 2000))
	}
	p.running = true
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Port returns the server's port on 127.0.0.1.
func (p *Postgres) Port() int { return p.port }

// DSN returns a connection URL for the postgres database as user postgres.
func (p *Postgres) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

// KeyValueDSN returns the DSN in key=value form (for drivers that prefer it).
func (p *Postgres) KeyValueDSN() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", p.port)
}

// Close stops the server (immediate shutdown) and removes its directory. It is idempotent.
func (p *Postgres) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	if p.running {
		p.running = false
		if out, e := p.run("pg_ctl", "-D", p.data(), "-m", "immediate", "-w", "-t", "30", "stop"); e != nil && !strings.Contains(string(out), "not running") {
			err = fmt.Errorf("testenv: pg_ctl stop: %w\n%s", e, out)
		}
	}
	if p.dir != "" {
		// The server may still be removing its socket; give it a moment.
		for range 10 {
			if e := os.RemoveAll(p.dir); e == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		p.dir = ""
	}
	return err
}
