package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

func open(t *testing.T, pg *testenv.Postgres, r *testenv.Redis, host string) *Service {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, pg.DSN(), rdb, workerid.WithIdentity(host, "127.0.0.1"), workerid.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// TestRegister_TwoInstancesWriteUniqueIDsToPostgres runs two service instances (pods
// auth-0 and auth-1) against one real PostgreSQL and one real Redis: each gets its own
// WorkerID, every row's ID comes from the hook, and the primary keys never collide.
func TestRegister_TwoInstancesWriteUniqueIDsToPostgres(t *testing.T) {
	pg, r := testenv.NewPostgres(t), testenv.NewRedis(t)
	a, b := open(t, pg, r, "auth-0"), open(t, pg, r, "auth-1")
	if a.Lease.WorkerID() != 0 || b.Lease.WorkerID() != 1 {
		t.Fatalf("WorkerIDs %d and %d, want 0 and 1 from the ordinals", a.Lease.WorkerID(), b.Lease.WorkerID())
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for i, s := range []*Service{a, b, a, b} {
		wg.Go(func() {
			users, err := s.Register(ctx, fmt.Sprintf("g%d", i), 1200)
			if err != nil {
				t.Error(err)
				return
			}
			for j := 1; j < len(users); j++ {
				if users[j].ID <= users[j-1].ID {
					t.Errorf("batch IDs not increasing: %d after %d", users[j].ID, users[j-1].ID)
					return
				}
			}
			p, _ := s.Gen.Decode(users[0].ID)
			if p.Worker != s.Lease.WorkerID() {
				t.Errorf("ID %d decodes to worker %d, the instance holds %d", users[0].ID, p.Worker, s.Lease.WorkerID())
			}
		})
	}
	wg.Wait()
	var ids []int64
	for _, m := range []any{&User{}, &App{}, &Grant{}} {
		var got []int64
		if err := a.DB.Model(m).Pluck("id", &got).Error; err != nil {
			t.Fatal(err)
		}
		if len(got) != 4*1200 {
			t.Fatalf("%T: %d rows, want %d", m, len(got), 4*1200)
		}
		ids = append(ids, got...)
	}
	slices.Sort(ids)
	if n := len(slices.Compact(ids)); n != 3*4*1200 {
		t.Fatalf("%d distinct IDs across users, apps and grants, want %d", n, 3*4*1200)
	}
}

// TestRegister_RefusedWhenLeaseLost: without a valid WorkerID the insert fails instead of
// writing an ID that could repeat.
func TestRegister_RefusedWhenLeaseLost(t *testing.T) {
	pg, r := testenv.NewPostgres(t), testenv.NewRedis(t)
	s := open(t, pg, r, "auth-5")
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := s.Register(context.Background(), fmt.Sprint(time.Now().UnixNano()), 1)
		if errors.Is(err, snowflake.ErrWorkerLeaseLost) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still inserting 5s after Redis died: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var n int64
	a := s.DB.Model(&User{}).Count(&n)
	if a.Error != nil {
		t.Fatal(a.Error)
	}
	t.Logf("%d users inserted before the lease ran out", n)
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
