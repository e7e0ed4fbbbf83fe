package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRedis_TLSAndACL: a Redis started WithRedisTLS and WithRedisACLUser
// serves only TLS clients with the test CA's client certificate, refuses
// the default user, holds the ACL user to its rules, and survives Restart.
func TestRedis_TLSAndACL(t *testing.T) {
	r := NewRedis(t, WithRedisTLS(), WithRedisACLUser("app", "app-pw", "~lock:*", "+get", "+set"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("admin PING over TLS: %v", err)
	}
	app := redis.NewClient(r.ClientOptions("app", "app-pw"))
	defer app.Close()
	if err := app.Set(ctx, "lock:a", "1", 0).Err(); err != nil {
		t.Fatalf("app SET lock:a: %v", err)
	}
	if err := app.Set(ctx, "other", "1", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("app SET other: %v, want NOPERM", err)
	}
	if err := app.Del(ctx, "lock:a").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("app DEL: %v, want NOPERM", err)
	}
	anon := redis.NewClient(r.ClientOptions("", ""))
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil {
		t.Fatal("the default user is on")
	}
	o := r.ClientOptions("app", "app-pw")
	o.TLSConfig = nil
	plain := redis.NewClient(o)
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("a plain TCP client was served")
	}
	if err := r.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if err := r.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

// TestEtcd_ClientCertTLS: an etcd started WithEtcdClientCertTLS serves a
// client with the test CA's client certificate and refuses one without.
func TestEtcd_ClientCertTLS(t *testing.T) {
	e := NewEtcd(t, WithEtcdClientCertTLS())
	if !strings.HasPrefix(e.Endpoint(), "https://") {
		t.Fatalf("endpoint %s, want https", e.Endpoint())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.Client(t).Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put with the client certificate: %v", err)
	}
	tc := e.Certs().ClientTLS()
	tc.Certificates = nil
	c, err := clientv3.New(e.ClientConfig(tc))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	short, cancel2 := context.WithTimeout(ctx, 3*time.Second)
	defer cancel2()
	if _, err := c.Get(short, "k"); err == nil {
		t.Fatal("a client without a certificate was served")
	}
}

// TestEtcd_UserLimitedToItsPrefix: under WithEtcdUser (and client-cert
// TLS) a user reads and writes under its prefix only, a client that does
// not log in is refused, and root (Client) may do anything.
func TestEtcd_UserLimitedToItsPrefix(t *testing.T) {
	e := NewEtcd(t, WithEtcdClientCertTLS(), WithEtcdUser("app", "app-pw", "lockgov/lock/"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.Client(t).Put(ctx, "anything", "v"); err != nil {
		t.Fatalf("root put: %v", err)
	}
	cfg := e.ClientConfig(e.Certs().ClientTLS())
	cfg.Username, cfg.Password = "app", "app-pw"
	app, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if _, err := app.Put(ctx, "lockgov/lock/a", "v"); err != nil {
		t.Fatalf("app put under its prefix: %v", err)
	}
	if _, err := app.Put(ctx, "other", "v"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("app put outside its prefix: %v, want permission denied", err)
	}
	cfg.Password = "wrong"
	if bad, err := clientv3.New(cfg); err == nil {
		defer bad.Close()
		if _, err := bad.Get(ctx, "lockgov/lock/a"); err == nil {
			t.Fatal("a wrong password was accepted")
		}
	} else if !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("wrong password: %v", err)
	}
}
