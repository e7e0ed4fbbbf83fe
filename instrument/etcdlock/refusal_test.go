package etcdlock_test

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/internal/storefail"
	"github.com/lockgov/lockgov/internal/testenv"
)

// TestGovern_AnEtcdThatRefusesThePutIsNoStoreFailureUnderTheDefaultRequestTimeout:
// a real etcd with authentication, and a user that may write only under
// etcdlock.DefaultPrefix, whose Locker was given another prefix (a
// misconfiguration): etcd answers every put at once with "permission
// denied". That is etcd's answer, not an etcd out of reach: the Acquire
// must fail with it, not with a store failure, under the default request
// timeout as with none, so that FailOpen does not hand out a process-local
// lock in its place (for every call, for as long as the misconfiguration
// lasts) and FailClosed names the refusal. Each wait strategy; the lease
// grant, which needs no permission, works.
func TestGovern_AnEtcdThatRefusesThePutIsNoStoreFailureUnderTheDefaultRequestTimeout(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t, testenv.WithEtcdUser("lockgov-app", "app-secret", etcdlock.DefaultPrefix))
	cfg := e.ClientConfig(nil)
	cfg.Username, cfg.Password = "lockgov-app", "app-secret"
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for _, tc := range []struct {
		name string
		opts []instrument.AcquireOption
	}{
		{"fail-fast", []instrument.AcquireOption{instrument.FailFast()}},
		{"retry", []instrument.AcquireOption{instrument.Retry(instrument.ConstantBackoff(time.Millisecond), 3)}},
		{"wait", nil},
	} {
		for _, policy := range []instrument.StoreFailurePolicy{instrument.FailClosed, instrument.FailOpen} {
			t.Run(tc.name+"/"+policy.String(), func(t *testing.T) {
				l := newLocker(t, c, etcdlock.WithPrefix("not-granted/"))
				g := governEtcd(t, l, policy)
				lease, err := g.Acquire(timeout(t, callerTime), "lock:refused", tc.opts...)
				if err == nil {
					_ = lease.Release(timeout(t, 10*time.Second))
					t.Fatalf("a lease (fence %d) where etcd refuses every put", lease.Fence())
				}
				if !errors.Is(err, rpctypes.ErrPermissionDenied) {
					t.Errorf("%v, want etcd's answer, permission denied", err)
				}
				if storefail.Unavailable(err) {
					t.Errorf("%v: a store failure, but etcd answered", err)
				}
				if n := g.degraded(t); n != 0 {
					t.Errorf("degraded = %v on etcd's refusal, want 0", n)
				}
			})
		}
	}
}
