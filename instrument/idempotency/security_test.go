package idempotency_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument/idempotency"
	"github.com/lockgov/lockgov/internal/testenv"
)

// idempotencyACL is the smallest Redis ACL a Store with the default prefix
// needs (docs/SECURITY.md): its keys, its scripts and what they call.
var idempotencyACL = []string{
	"resetkeys", "~lockgov:idem:*", "resetchannels", "-@all",
	"+eval", "+evalsha", "+ping", "+hello",
	"+hget", "+hset", "+hdel", "+hincrby", "+hmget", "+pexpire", "+time",
}

// TestTLSACL_DoRunsOnceAndReplaysWithTheMinimalACL: over TLS, as a user
// limited to lockgov:idem:* and the Store's commands, Do runs the function
// once and replays its result, and Redis refuses nothing.
func TestTLSACL_DoRunsOnceAndReplaysWithTheMinimalACL(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t, testenv.WithRedisTLS(), testenv.WithRedisACLUser("idem", "idem-secret", idempotencyACL...))
	c := redis.NewClient(r.ClientOptions("idem", "idem-secret"))
	defer c.Close()
	s := newStore(t, c)
	ctx := timeout(t, 30*time.Second)
	runs := 0
	fn := func(context.Context, idempotency.Attempt) ([]byte, error) {
		runs++
		return []byte("charged"), nil
	}
	for i := range 2 {
		res, err := s.Do(ctx, "order-1", []byte("fp"), fn)
		if err != nil {
			t.Fatalf("Do #%d over TLS+ACL: %v", i+1, err)
		}
		if string(res.Body) != "charged" || res.Replayed != (i == 1) {
			t.Fatalf("Do #%d = %+v", i+1, res)
		}
	}
	if runs != 1 {
		t.Fatalf("the function ran %d times, want 1", runs)
	}
	if _, err := s.Do(ctx, "order-1", []byte("other"), fn); err == nil {
		t.Fatal("a reused key with another fingerprint was accepted")
	}
	log, err := r.Client(t).Do(ctx, "ACL", "LOG").Slice()
	if err != nil || len(log) > 0 {
		t.Fatalf("ACL LOG: %v, %v: the minimal ACL refused commands", log, err)
	}

	// A wrong password or a CA that did not sign the server fails at once,
	// naming the problem, and the function does not run.
	other := testenv.NewCerts(t)
	for _, tc := range []struct {
		name, want string
		mutate     func(*redis.Options)
	}{
		{"wrong password", "WRONGPASS", func(o *redis.Options) { o.Password = "nope" }},
		{"wrong CA", "certificate signed by unknown authority", func(o *redis.Options) { o.TLSConfig = other.ClientTLS() }},
	} {
		o := r.ClientOptions("idem", "idem-secret")
		tc.mutate(o)
		bad := redis.NewClient(o)
		defer bad.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := newStore(t, bad).Do(ctx, "order-2", []byte("fp"), fn)
		deadline := ctx.Err()
		cancel()
		if err == nil || deadline != nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "idem-secret") {
			t.Fatalf("%s: err %v (deadline %v); want a quick error naming %q without the password", tc.name, err, deadline, tc.want)
		}
	}
	if runs != 1 {
		t.Fatalf("the function ran %d times with bad credentials", runs-1)
	}
}
