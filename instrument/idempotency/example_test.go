package idempotency_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/testenv"
)

func exampleRedis() (*redis.Client, func()) {
	r, err := testenv.StartRedis()
	if err != nil {
		panic(err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	return c, func() { _ = c.Close(); _ = r.Close() }
}

func ExampleStore_Do() {
	rdb, stop := exampleRedis()
	defer stop()
	s, err := idempotency.New(rdb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	charge := func(ctx context.Context, a idempotency.Attempt) ([]byte, error) {
		return []byte("charged 10 EUR"), nil
	}
	for range 2 { // the client retries
		res, err := s.Do(ctx, "payment-7f3a", []byte("sha256-of-request"), charge)
		fmt.Println(string(res.Body), res.Replayed, err)
	}
	_, err = s.Do(ctx, "payment-7f3a", []byte("another-request"), charge)
	fmt.Println(errors.Is(err, idempotency.ErrFingerprintMismatch))
	// Output:
	// charged 10 EUR false <nil>
	// charged 10 EUR true <nil>
	// true
}

func ExampleNoWait() {
	rdb, stop := exampleRedis()
	defer stop()
	s, _ := idempotency.New(rdb)
	ctx := context.Background()
	_, _ = s.Do(ctx, "job-1", nil, func(ctx context.Context, a idempotency.Attempt) ([]byte, error) {
		// While the first attempt runs, a second one gives up at once.
		_, err := s.Do(ctx, "job-1", nil, func(context.Context, idempotency.Attempt) ([]byte, error) {
			return nil, nil
		}, idempotency.NoWait())
		fmt.Println(errors.Is(err, idempotency.ErrInProgress))
		return []byte("done"), nil
	})
	// Output: true
}
