package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/quota"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/policy"
)

// policyYAML governs the lock way: every Acquire needs a deadline (enforce),
// a 5s TTL renewed while held, and waiters wait until their deadline.
const policyYAML = `
version: 1
patterns:
  - pattern: "lock:stock:{item}"
    mode: enforce
    ttl: 5s
    max_ttl: 1m
    wait: {strategy: deadline}
`

// Env is the connections the four ways share: one Redis client, one
// PostgreSQL pool, a governed lock on that Redis, a quota on it, and the
// Prometheus registry their metrics go to.
type Env struct {
	RDB    *redis.Client
	DB     *pgxpool.Pool
	Locker *instrument.Governed
	Quota  *quota.Quota
	Reg    *prometheus.Registry
	raw    *redislock.Locker
}

// Open connects to Redis at redisAddr and PostgreSQL at pgDSN, with pools
// sized for conns concurrent deductions, and creates the tables.
func Open(ctx context.Context, redisAddr, pgDSN string, conns int) (*Env, error) {
	e := &Env{Reg: prometheus.NewRegistry()}
	e.RDB = redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, PoolSize: conns + 8})
	cfg, err := pgxpool.ParseConfig(pgDSN)
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("postgres DSN: %w", err)
	}
	// One hot row serialises the PostgreSQL ways whatever the pool size;
	// more connections than that only queue on the row lock.
	cfg.MaxConns = int32(min(max(conns, 4), 32))
	if e.DB, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		e.Close()
		return nil, err
	}
	if err := Migrate(ctx, e.DB); err != nil {
		e.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	pol, err := policy.Parse("seckill-policy.yaml", []byte(policyYAML))
	if err != nil {
		e.Close()
		return nil, err
	}
	if e.raw, err = redislock.New(e.RDB, redislock.WithService("seckill")); err != nil {
		e.Close()
		return nil, err
	}
	if e.Locker, err = instrument.NewGoverned(e.raw, instrument.WithPolicy(pol), instrument.WithRegisterer(e.Reg)); err != nil {
		e.Close()
		return nil, err
	}
	if e.Quota, err = quota.New(e.RDB, quota.WithRegisterer(e.Reg)); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Ways returns the four ways on one item each (named after item).
func (e *Env) Ways(item string) []Way {
	return []Way{
		&ForUpdate{DB: e.DB, Item: item + "-forupdate"},
		&Optimistic{DB: e.DB, Item: item + "-optimistic"},
		&LockGetSet{RDB: e.RDB, Locker: e.Locker, Item: item + "-lock"},
		&QuotaLedger{DB: e.DB, Quota: e.Quota, Item: item + "-quota"},
	}
}

// Close closes everything Open opened.
func (e *Env) Close() error {
	var errs []error
	if e.Locker != nil {
		errs = append(errs, e.Locker.Close())
	}
	if e.raw != nil {
		errs = append(errs, e.raw.Close())
	}
	if e.DB != nil {
		e.DB.Close()
	}
	if e.RDB != nil {
		errs = append(errs, e.RDB.Close())
	}
	return errors.Join(errs...)
}
