// Command authids is the spec's auth center: users, apps and grants get Snowflake IDs
// from a generator whose WorkerID is leased from Redis, filled in before insert into
// PostgreSQL by a GORM plugin.
//
//	go run . --dsn postgres://postgres@127.0.0.1:5433/postgres --redis 127.0.0.1:6380 --users 1000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// User, App and Grant are the auth center's entities. IDs travel to browsers as strings
// (json:",string"): they exceed 2^53.
type User struct {
	ID        int64  `gorm:"primaryKey;autoIncrement:false" json:"id,string"`
	Email     string `gorm:"uniqueIndex;not null" json:"email"`
	CreatedAt time.Time
}

type App struct {
	ID      int64  `gorm:"primaryKey;autoIncrement:false" json:"id,string"`
	OwnerID int64  `gorm:"index;not null" json:"owner_id,string"`
	Name    string `gorm:"not null" json:"name"`
}

type Grant struct {
	ID     int64  `gorm:"primaryKey;autoIncrement:false" json:"id,string"`
	UserID int64  `gorm:"index;not null" json:"user_id,string"`
	AppID  int64  `gorm:"index;not null" json:"app_id,string"`
	Scope  string `gorm:"not null" json:"scope"`
}

// Service is the auth center's storage with its ID generator.
type Service struct {
	DB    *gorm.DB
	Gen   *snowflake.Generator
	Lease *workerid.Lease
}

// Open claims a WorkerID for "auth" (range 0-99; a StatefulSet pod auth-N prefers N),
// binds a generator to the lease, and opens the database with the ID plugin.
func Open(ctx context.Context, dsn string, rdb redis.UniversalClient, opts ...workerid.Option) (*Service, error) {
	reg, err := workerid.NewRedis(rdb, append([]workerid.Option{workerid.WithServiceRange("auth", 0, 99)}, opts...)...)
	if err != nil {
		return nil, err
	}
	lease, err := reg.Claim(ctx, "auth")
	if err != nil {
		return nil, fmt.Errorf("claim a WorkerID: %w", err)
	}
	gen, err := snowflake.New(lease.WorkerID(), snowflake.WithLease(lease))
	if err != nil {
		_ = lease.Release(ctx)
		return nil, err
	}
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err == nil {
		err = db.Use(IDs{Gen: gen})
	}
	if err == nil {
		err = db.WithContext(ctx).AutoMigrate(&User{}, &App{}, &Grant{})
	}
	if err != nil {
		_ = lease.Release(ctx)
		return nil, err
	}
	return &Service{DB: db, Gen: gen, Lease: lease}, nil
}

// Close releases the WorkerID (persisting the last millisecond used) and the database.
func (s *Service) Close(ctx context.Context) error {
	err := s.Lease.Release(ctx)
	if sqlDB, e := s.DB.DB(); e == nil {
		err = errors.Join(err, sqlDB.Close())
	}
	return err
}

// Register creates n users in batches, each with an app and a grant.
func (s *Service) Register(ctx context.Context, prefix string, n int) ([]User, error) {
	users := make([]User, n)
	for i := range users {
		users[i].Email = fmt.Sprintf("%s-%d@example.com", prefix, i)
	}
	err := s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.CreateInBatches(&users, 500).Error; err != nil {
			return err
		}
		for _, u := range users {
			app := App{OwnerID: u.ID, Name: "console"}
			if err := tx.Create(&app).Error; err != nil {
				return err
			}
			if err := tx.Create(&Grant{UserID: u.ID, AppID: app.ID, Scope: "openid"}).Error; err != nil {
				return err
			}
		}
		return nil
	})
	return users, err
}

func main() {
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL URL")
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address for the WorkerID registry")
	n := flag.Int("users", 100, "users to register")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	defer rdb.Close()
	s, err := Open(ctx, *dsn, rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(context.Background())
	users, err := s.Register(ctx, fmt.Sprintf("run%d", time.Now().Unix()), *n)
	if err != nil {
		log.Fatal(err)
	}
	p, _ := s.Gen.Decode(users[len(users)-1].ID)
	fmt.Printf("registered %d users on WorkerID %d; last id %d (issued %s)\n", len(users), s.Lease.WorkerID(), p.ID, p.Time.Format(time.RFC3339Nano))
}
