package redislock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/locktest"
	"github.com/lockgov/lockgov/internal/testenv"
)

// MinimalACL is the smallest Redis ACL a service using redislock with
// keys under "lock:" needs (docs/SECURITY.md): the lock keys and their
// companions ("{lock:...}:fence", ":queue", ":waiters", ":rel:..."), the
// release channels, the scripts and the commands the scripts call.
var MinimalACL = []string{
	"resetkeys", "~lock:*", "~{lock:*",
	"resetchannels", "&{lock:*",
	"-@all",
	"+eval", "+evalsha", "+subscribe", "+unsubscribe", "+ping", "+hello",
	"+get", "+set", "+del", "+exists", "+pexpire", "+pttl", "+time", "+publish",
	"+lindex", "+lpop", "+lpos", "+lrem", "+rpush",
	"+zadd", "+zrem", "+zscore",
}

// secureRedis starts a Redis that speaks only TLS and has one ACL user,
// "lockgov-app", restricted to MinimalACL.
func secureRedis(t *testing.T) *testenv.Redis {
	t.Helper()
	return testenv.NewRedis(t, testenv.WithRedisTLS(), testenv.WithRedisACLUser("lockgov-app", "app-secret", MinimalACL...))
}

func appClient(t *testing.T, r *testenv.Redis, mutate func(*redis.Options)) *redis.Client {
	t.Helper()
	o := r.ClientOptions("lockgov-app", "app-secret")
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = time.Second, 2*time.Second, 2*time.Second
	if mutate != nil {
		mutate(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// noACLDenials fails the test with Redis's ACL LOG when a command was
// refused: the minimal ACL is then not enough.
func noACLDenials(t *testing.T, ctx context.Context, r *testenv.Redis) {
	t.Helper()
	log, err := r.Client(t).Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatalf("ACL LOG: %v", err)
	}
	if len(log) > 0 {
		t.Fatalf("the minimal ACL refused commands: %v", log)
	}
}

// TestTLSACL_ConformanceWithTheMinimalACL: over TLS, as a user that may
// touch only lock:* keys with the commands lockgov needs, the conformance
// suite (every wait strategy, ownership, expiry and deletion, release
// wake-ups, re-entry through Govern, no leaked goroutine) passes in both
// modes, and a lease's watchdog renews it; Redis refuses nothing (ACL LOG
// stays empty). The loser deletes keys as the default user.
func TestTLSACL_ConformanceWithTheMinimalACL(t *testing.T) {
	// locktest.Run checks goroutines against a goleak.IgnoreCurrent snapshot:
	// nothing else may run in its process.
	if inOwnProcess(t) {
		return
	}
	r := secureRedis(t)
	admin := r.Client(t)
	for _, mode := range []struct {
		name string
		opts []redislock.Option
	}{{"plain", nil}, {"fair", []redislock.Option{redislock.Fair()}}} {
		t.Run(mode.name, func(t *testing.T) {
			locktest.Run(t,
				func(t *testing.T) instrument.Locker { return newLocker(t, appClient(t, r, nil), mode.opts...) },
				locktest.WithKeyPrefix("lock:locktest:"), // the ACL allows lock:* only
				// and no heartbeats (lockgov:fleet:*, docs/SECURITY.md)
				locktest.WithGovernOptions(instrument.WithoutHeartbeat()),
				locktest.WithExpiryTTL(300*time.Millisecond),
				locktest.WithLoser(deleter(admin)),
			)
			t.Run("WatchdogRenews", func(t *testing.T) {
				ctx := timeout(t, 30*time.Second)
				// A renewal every 500 ms, ~1 s before the lease would expire,
				// with the package's other tests running beside this one.
				withRenewals, renewed := renewedSignal(1500 * time.Millisecond)
				lease, err := newLocker(t, appClient(t, r, nil), mode.opts...).Acquire(ctx, "lock:tls:renew:"+mode.name, withRenewals)
				if err != nil {
					t.Fatalf("Acquire over TLS+ACL: %v", err)
				}
				select {
				case <-renewed:
				case <-ctx.Done():
					t.Fatal("the watchdog never renewed over TLS+ACL")
				}
				if err := lease.Refresh(ctx); err != nil {
					t.Fatalf("Refresh: %v", err)
				}
				if err := lease.Release(ctx); err != nil {
					t.Fatalf("Release: %v", err)
				}
			})
			noACLDenials(t, timeout(t, 10*time.Second), r)
		})
	}
}

// TestTLSACL_BadCredentialsAndKeysFailFastNamingTheProblem: a wrong
// password, a CA that did not sign the server's certificate, no client
// certificate, and a key outside the user's patterns each fail Acquire
// within its deadline with an error that says which.
func TestTLSACL_BadCredentialsAndKeysFailFastNamingTheProblem(t *testing.T) {
	t.Parallel()
	r := secureRedis(t)
	other := testenv.NewCerts(t)
	for _, tc := range []struct {
		name, key, want string
		mutate          func(*redis.Options)
	}{
		{"wrong password", "lock:a", "WRONGPASS", func(o *redis.Options) { o.Password = "nope" }},
		{"unknown user", "lock:a", "WRONGPASS", func(o *redis.Options) { o.Username = "mallory" }},
		{"wrong CA", "lock:a", "certificate signed by unknown authority", func(o *redis.Options) { o.TLSConfig = other.ClientTLS() }},
		{"no client certificate", "lock:a", "", func(o *redis.Options) { o.TLSConfig.Certificates = nil }},
		{"plain TCP", "lock:a", "", func(o *redis.Options) { o.TLSConfig = nil }},
		{"key outside the ACL", "order:1", "NOPERM", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLocker(t, appClient(t, r, tc.mutate))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := l.Acquire(ctx, tc.key, instrument.FailFast())
			if err == nil {
				t.Fatal("Acquire succeeded")
			}
			if ctx.Err() != nil {
				t.Fatalf("Acquire ran into its deadline (%v): a refusal must be quick", err)
			}
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "app-secret") {
				t.Fatalf("error %q repeats the password", err)
			}
		})
	}
}
