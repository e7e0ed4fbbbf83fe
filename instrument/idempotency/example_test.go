package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
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

func ExampleMiddleware() {
	rdb, stop := exampleRedis()
	defer stop()
	s, _ := idempotency.New(rdb)
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "payment accepted")
	})
	h := idempotency.Middleware(s,
		idempotency.RequireKey(),
		idempotency.WithPrincipal(func(r *http.Request) string { return r.Header.Get("X-Tenant") }),
	)(pay)
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":10}`))
		req.Header.Set("Idempotency-Key", "7f3a")
		req.Header.Set("X-Tenant", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Body.String())
	}
	// Output:
	// 201 payment accepted
	// 201 payment accepted
}

func ExampleNew() {
	rdb, stop := exampleRedis()
	defer stop()
	s, err := idempotency.New(rdb,
		idempotency.WithLease(10*time.Second),   // a dead owner blocks the key at most this long
		idempotency.WithResultTTL(24*time.Hour), // how long a retry is answered from the record
		idempotency.WithRegisterer(prometheus.NewRegistry()),
	)
	fmt.Println(s != nil, err)
	// Output: true <nil>
}

// With Redis down a fail-open Store runs fn without the check and says so.
func ExampleWithStoreFailure() {
	srv, err := testenv.StartRedis()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	s, err := idempotency.New(rdb, idempotency.WithStoreFailure(instrument.FailOpen),
		idempotency.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	_ = srv.Kill() // Redis goes down

	res, err := s.Do(context.Background(), "pay-1", nil, func(context.Context, idempotency.Attempt) ([]byte, error) {
		return []byte("sent"), nil
	})
	fmt.Println(string(res.Body), res.Degraded, err)
	// Output: sent true <nil>
}

// Results that survive a failover to a replica: fn runs only on a claim
// one replica has, and a result is reported only once one replica has it.
// A result too few replicas acknowledged is in Result.Body; a retry
// replays it. (Not run: it needs a Sentinel deployment.)
func ExampleWithReplicaAcks() {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "payments",
		SentinelAddrs: []string{"sentinel-0:26379", "sentinel-1:26379", "sentinel-2:26379"},
		ReadTimeout:   3 * time.Second, // at least the ack timeout + 250ms
	})
	defer rdb.Close()
	s, err := idempotency.New(rdb, idempotency.WithReplicaAcks(1, time.Second))
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Do(ctx, "pay:order-1", []byte("sha256 of the request"), func(ctx context.Context, a idempotency.Attempt) ([]byte, error) {
		return []byte("charged"), nil // the effect, guarded by a.Fence
	})
	var nr *idempotency.NotReplicatedError
	switch {
	case errors.As(err, &nr):
		fmt.Printf("on %d of %d replicas: retry pay:order-1 (result so far: %q)\n", nr.Acked, nr.Wanted, res.Body)
	case err != nil:
		fmt.Println("error:", err)
	default:
		fmt.Printf("%s, on a replica too\n", res.Body)
	}
}
