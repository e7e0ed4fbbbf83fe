package etcdlock_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/internal/testenv"
)

// appClient logs in as lockgov-app, a user that may read and write only
// under etcdlock.DefaultPrefix (docs/SECURITY.md), over client-cert TLS.
func appClient(t *testing.T, e *testenv.Etcd, password string) (*clientv3.Client, error) {
	t.Helper()
	cfg := e.ClientConfig(e.Certs().ClientTLS())
	cfg.Username, cfg.Password = "lockgov-app", password
	c, err := clientv3.New(cfg)
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, err
}

// TestClientCertTLS_AcquireRenewReleaseAndWake: on an etcd that requires
// client certificates and a login, as a user limited to etcdlock's prefix,
// a lease is taken, renewed by hand, released, and the release hands the
// lock to a waiter with a higher fence. A wrong password is refused at
// login naming it.
func TestClientCertTLS_AcquireRenewReleaseAndWake(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t, testenv.WithEtcdClientCertTLS(), testenv.WithEtcdUser("lockgov-app", "app-secret", etcdlock.DefaultPrefix))
	ctx := timeout(t, time.Minute)
	ca, err := appClient(t, e, "app-secret")
	if err != nil {
		t.Fatal(err)
	}
	cb, err := appClient(t, e, "app-secret")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appClient(t, e, "wrong"); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("wrong password: %v, want authentication failed", err)
	}
	la, lb := newLocker(t, ca), newLocker(t, cb)
	const key = "lock:tls"
	lease, err := la.Acquire(ctx, key, instrument.WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("Acquire over client-cert TLS: %v", err)
	}
	if err := lease.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := lb.Acquire(ctx, key, instrument.WithTTL(2*time.Second))
		if err == nil {
			if l.Fence() <= lease.Fence() {
				err = errors.New("the waiter's fence is not above the first holder's")
			} else {
				err = l.Release(ctx)
			}
		}
		got <- err
	}()
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

// TestClientCertTLS_WrongCAOrNoClientCertFailsByTheDeadline: a client that
// does not trust the server's CA, or presents no certificate, gets an error
// from Acquire by its context deadline, never a hang. The etcd client
// reports a failed handshake only as the deadline (its RPCs wait for a
// ready connection), so the error names the key and the step, not the
// certificate: the agent probes TLS itself at start for that
// (internal/agent TestTLSACL_*).
func TestClientCertTLS_WrongCAOrNoClientCertFailsByTheDeadline(t *testing.T) {
	t.Parallel()
	e := testenv.NewEtcd(t, testenv.WithEtcdClientCertTLS())
	other := testenv.NewCerts(t)
	for _, tc := range []struct {
		name string
		tls  func() *tls.Config
	}{
		{"wrong CA", other.ClientTLS},
		{"no client certificate", func() *tls.Config {
			c := e.Certs().ClientTLS()
			c.Certificates = nil
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := clientv3.New(e.ClientConfig(tc.tls()))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			l := newLocker(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = l.Acquire(ctx, "lock:x", instrument.FailFast())
			if err == nil {
				t.Fatal("Acquire succeeded")
			}
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "lock:x") {
				t.Fatalf("error %q: want the deadline, naming the key", err)
			}
		})
	}
}
