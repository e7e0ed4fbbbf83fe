package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/internal/testenv"
)

// agentACL is the Redis ACL the agent needs (docs/SECURITY.md): it reads
// every lock key and lockgov's own keys (heartbeats, WorkerIDs, its
// election and findings record), deletes immortal locks when remediation is
// on, and elects through a redislock lock.
var agentACL = []string{
	"resetkeys", "~lock:*", "~{lock:*", "~lockgov:*", "~{lockgov:*",
	"resetchannels", "&{lockgov:*",
	"-@all",
	"+scan", "+get", "+pttl", "+exists", "+info", "+time", "+ping", "+hello",
	"+eval", "+evalsha", "+subscribe", "+unsubscribe", "+publish",
	"+set", "+del", "+pexpire",
}

// TestTLSACL_AgentWatchesAndRemediatesOverTLSWithItsACL: an agent whose
// config file names TLS files and password files for a Redis that speaks
// only TLS (ACL user limited to agentACL) and an etcd that requires client
// certificates and a login (user limited to lockgov's prefixes) is ready
// on both, finds an immortal lock, deletes it with
// its remediation token (and not without), and never logs or answers a
// password. Redis refuses nothing the agent does.
//
// With etcd the agent elects on etcd; without, on Redis through redislock,
// which the ACL must allow too.
func TestTLSACL_AgentWatchesAndRemediatesOverTLSWithItsACL(t *testing.T) {
	for _, withEtcd := range []bool{true, false} {
		name := "redis+etcd"
		if !withEtcd {
			name = "redis-only"
		}
		t.Run(name, func(t *testing.T) { agentOverTLS(t, withEtcd) })
	}
}

func agentOverTLS(t *testing.T, withEtcd bool) {
	r := testenv.NewRedis(t, testenv.WithRedisTLS(), testenv.WithRedisACLUser("lockgov-agent", "agent-redis-secret", agentACL...))
	// The agent's etcd user may use lockgov's prefixes only.
	e := testenv.NewEtcd(t, testenv.WithEtcdClientCertTLS(), testenv.WithEtcdUser("lockgov-agent", "agent-etcd-secret", "lockgov/", "/lockgov/"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := r.Client(t)
	if err := admin.Set(ctx, "lock:order:42", "tok-immortal 7 {\"service\":\"billing\",\"pid\":1}", 0).Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "redis-password")
	if err := os.WriteFile(pwFile, []byte("agent-redis-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	etcdPwFile := filepath.Join(dir, "etcd-password")
	if err := os.WriteFile(etcdPwFile, []byte("agent-etcd-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, ec := r.Certs(), e.Certs()
	src := "redis: rediss://" + r.Addr() + "\n" +
		"redis_auth:\n  username: lockgov-agent\n  password_file: " + pwFile + "\n" +
		"  tls_ca: " + rc.CAFile + "\n  tls_cert: " + rc.ClientCertFile + "\n  tls_key: " + rc.ClientKeyFile + "\n"
	if withEtcd {
		src += "etcd: " + e.Endpoint() + "\n" +
			"etcd_auth:\n  username: lockgov-agent\n  password_file: " + etcdPwFile + "\n  tls_ca: " + ec.CAFile + "\n  tls_cert: " + ec.ClientCertFile + "\n  tls_key: " + ec.ClientKeyFile + "\n"
	}
	cfg, err := ParseConfig("agent.yaml", []byte(src))
	if err != nil {
		t.Fatalf("ParseConfig:\n%s\n%v", src, err)
	}
	var logs syncBuf
	base := testConfig("agent")
	cfg.ID, cfg.Listen, cfg.Interval, cfg.Stdout = base.ID, base.Listen, base.Interval, base.Stdout
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.RemediationToken = "remediation-secret"
	a := start(t, *cfg)

	waitFor(t, "/readyz 200 on both TLS stores", func() bool {
		code, _ := get(t, a.URL()+"readyz")
		return code == 200
	})
	waitFor(t, "the agent to lead", a.Leader)
	waitFor(t, "an immortal finding over TLS+ACL", func() bool {
		for _, f := range findings(t, a).Findings {
			if f.Kind == "immortal" && f.Key == "lock:order:42" {
				return true
			}
		}
		return false
	})
	if code, _ := del(t, a, "key=lock:order:42", ""); code != 401 {
		t.Fatalf("remediation without the token: %d, want 401", code)
	}
	if code, _ := del(t, a, "key=lock:order:42", "wrong"); code != 401 {
		t.Fatalf("remediation with a wrong token: %d, want 401", code)
	}
	if n, _ := admin.Exists(ctx, "lock:order:42").Result(); n != 1 {
		t.Fatal("the lock went without the token")
	}
	if code, body := del(t, a, "store=rediss://"+r.Addr()+"&key=lock:order:42", cfg.RemediationToken); code != 200 {
		t.Fatalf("remediation with the token: %d %s", code, body)
	}
	if n, _ := admin.Exists(ctx, "lock:order:42").Result(); n != 0 {
		t.Fatal("the immortal lock is still there")
	}
	aclLog, err := admin.Do(ctx, "ACL", "LOG").Slice()
	if err != nil || len(aclLog) > 0 {
		t.Fatalf("ACL LOG: %v, %v: the agent's ACL refused commands", aclLog, err)
	}
	_, body := get(t, a.URL()+"api/v1/findings")
	for _, secret := range []string{"agent-redis-secret", "agent-etcd-secret", "remediation-secret", "tok-immortal"} {
		if strings.Contains(logs.String(), secret) || strings.Contains(body, secret) {
			t.Errorf("%q appears in the agent's log or API", secret)
		}
	}
}

// TestTLSACL_AgentBadCredentialsNameTheProblem: a CA that did not sign the
// server's certificate stops Start with an error naming the store and the
// certificate problem; a wrong Redis password is reported on /readyz
// (WRONGPASS) without the password; TLS files on a plain URL and a
// password in the config file are refused naming the field. Nothing hangs.
func TestTLSACL_AgentBadCredentialsNameTheProblem(t *testing.T) {
	r := testenv.NewRedis(t, testenv.WithRedisTLS(), testenv.WithRedisACLUser("lockgov-agent", "agent-redis-secret", agentACL...))
	e := testenv.NewEtcd(t, testenv.WithEtcdClientCertTLS())
	other := testenv.NewCerts(t)
	rc, ec := r.Certs(), e.Certs()
	good := StoreAuth{Username: "lockgov-agent", Password: "agent-redis-secret", CAFile: rc.CAFile, CertFile: rc.ClientCertFile, KeyFile: rc.ClientKeyFile}

	for _, tc := range []struct {
		name string
		set  func(*Config)
		want []string
	}{
		{"redis wrong CA", func(c *Config) {
			c.Redis = []string{"rediss://" + r.Addr()}
			c.RedisAuth = good
			c.RedisAuth.CAFile = other.CAFile
		}, []string{"--redis rediss://" + r.Addr(), "certificate signed by unknown authority"}},
		{"etcd wrong CA", func(c *Config) {
			c.Etcd = e.Endpoints()
			c.EtcdAuth = StoreAuth{CAFile: other.CAFile, CertFile: ec.ClientCertFile, KeyFile: ec.ClientKeyFile}
		}, []string{"--etcd " + strings.TrimPrefix(e.Endpoint(), "https://"), "certificate signed by unknown authority"}},
		{"etcd no client certificate", func(c *Config) {
			c.Etcd = e.Endpoints()
			c.EtcdAuth = StoreAuth{CAFile: ec.CAFile}
		}, []string{"--etcd", "certificate"}},
		{"TLS files on a plain URL", func(c *Config) {
			c.Redis = []string{"redis://" + r.Addr()}
			c.RedisAuth = good
		}, []string{"redis_auth sets TLS files", "rediss://"}},
		{"unreadable CA file", func(c *Config) {
			c.Redis = []string{"rediss://" + r.Addr()}
			c.RedisAuth = good
			c.RedisAuth.CAFile = filepath.Join(t.TempDir(), "missing.pem")
		}, []string{"redis_auth.tls_ca", "missing.pem"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig("agent")
			tc.set(&cfg)
			a, err := Start(context.Background(), cfg)
			if err == nil {
				_ = a.Close()
				t.Fatal("Start succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "agent-redis-secret") {
				t.Errorf("error %q repeats the password", err)
			}
		})
	}

	t.Run("redis wrong password", func(t *testing.T) {
		cfg := testConfig("agent")
		cfg.Redis = []string{"rediss://" + r.Addr()}
		cfg.RedisAuth = good
		cfg.RedisAuth.Password = "not-the-password"
		a := start(t, cfg)
		var body string
		waitFor(t, "/readyz 503 naming WRONGPASS", func() bool {
			var code int
			code, body = get(t, a.URL()+"readyz")
			return code == 503 && strings.Contains(body, "WRONGPASS")
		})
		if strings.Contains(body, "not-the-password") {
			t.Errorf("/readyz repeats the password: %s", body)
		}
	})

	t.Run("password in the config file", func(t *testing.T) {
		_, err := ParseConfig("agent.yaml", []byte("redis_auth:\n  password: hunter2\n"))
		if err == nil || !strings.Contains(err.Error(), "agent.yaml:2: redis_auth.password: not read from files") || strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("err = %v", err)
		}
	})
}
