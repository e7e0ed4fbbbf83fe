package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/lockgov/lockgov/detectors"
	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/policy"
)

func del(t *testing.T, a *Agent, query, token string) (int, string) {
	t.Helper()
	return delIfMatch(t, a, query, token)
}

// delIfMatch is del with one If-Match header per value of ifMatch.
func delIfMatch(t *testing.T, a *Agent, query, token string, ifMatch ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, a.URL()+"api/v1/locks?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, v := range ifMatch {
		req.Header.Add("If-Match", v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRemediation_OffByDefault_401WithoutToken_DeletesOnlyAnImmortalLock(t *testing.T) {
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := redislock.New(c, redislock.WithService("billing"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := l.Acquire(ctx, "lock:order:1", instrument.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	raw, _ := c.Get(ctx, "lock:order:1").Result()
	ownerToken, _, _ := strings.Cut(raw, " ")
	// A crash between SETNX and EXPIRE leaves a lock without a TTL.
	if err := c.Set(ctx, "lock:order:2", "tok-immortal 7 {\"service\":\"billing\",\"pid\":1}", 0).Err(); err != nil {
		t.Fatal(err)
	}

	off := testConfig("agent-off")
	off.Redis = []string{"redis://" + r.Addr()}
	a := start(t, off)
	if code, body := del(t, a, "key=lock:order:2", "anything"); code != 401 || !strings.Contains(body, "remediation is off") {
		t.Errorf("remediation off: %d %s", code, body)
	}

	var logs syncBuf
	on := testConfig("agent-on")
	on.Redis = off.Redis
	on.RemediationToken = "s3cr3t-remediation"
	on.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	b := start(t, on)
	for _, tok := range []string{"", "wrong"} {
		if code, _ := del(t, b, "key=lock:order:2", tok); code != 401 {
			t.Errorf("token %q: %d, want 401", tok, code)
		}
	}
	if code, body := del(t, b, "key=lock:order:1", on.RemediationToken); code != 409 {
		t.Errorf("a lock with a TTL: %d %s, want 409", code, body)
	}
	if code, _ := del(t, b, "key=lock:nosuch", on.RemediationToken); code != 404 {
		t.Errorf("no such lock: %d, want 404", code)
	}
	code, body := del(t, b, "key=lock:order:2", on.RemediationToken)
	if code != 200 || !strings.Contains(body, `"key":"lock:order:2"`) {
		t.Fatalf("immortal lock: %d %s", code, body)
	}
	if n, _ := c.Exists(ctx, "lock:order:2").Result(); n != 0 {
		t.Error("the immortal lock is still there")
	}
	if n, _ := c.Exists(ctx, "lock:order:1").Result(); n != 1 {
		t.Error("the healthy lock is gone")
	}
	if !strings.Contains(logs.String(), "deleted an immortal lock") {
		t.Errorf("remediation not logged:\n%s", logs.String())
	}

	// Owner tokens and the remediation token appear in no answer, log
	// line or metric.
	waitFor(t, "a scan listing the locks", func() bool {
		_, body := get(t, b.URL()+"api/v1/locks")
		return strings.Contains(body, "lock:order:1")
	})
	var seen []string
	for _, p := range []string{"api/v1/locks", "api/v1/findings", "api/v1/instances", "metrics", "readyz"} {
		_, body := get(t, b.URL()+p)
		seen = append(seen, body)
	}
	seen = append(seen, body, logs.String())
	for _, s := range seen {
		for _, secret := range []string{ownerToken, "tok-immortal", on.RemediationToken} {
			if strings.Contains(s, secret) {
				t.Errorf("%q appears in %.200q", secret, s)
			}
		}
	}
}

func TestRemediation_Etcd_DeletesAnEntryWithoutLeaseOnly(t *testing.T) {
	e := testenv.NewEtcd(t)
	ec := testenv.NewEtcdClient(t, e.Endpoints()...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := etcdlock.New(ec)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.Acquire(ctx, "lock:a", instrument.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	immortal := etcdlock.DefaultPrefix + "lock:b\x00" + "00000000000000ff"
	if _, err := ec.Put(ctx, immortal, `{"service":"x","pid":2}`); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("agent")
	cfg.Etcd = e.Endpoints()
	cfg.RemediationToken = "t0k"
	a := start(t, cfg)
	if code, body := del(t, a, "key=lock:a", "t0k"); code != 409 {
		t.Errorf("leased lock: %d %s, want 409", code, body)
	}
	if code, body := del(t, a, "key=lock:b", "t0k"); code != 200 {
		t.Errorf("immortal lock: %d %s", code, body)
	}
	if resp, _ := ec.Get(ctx, immortal); len(resp.Kvs) != 0 {
		t.Error("the entry without lease is still there")
	}
}

// TestRemediation_Etcd_AnEntryOfAnotherWriterIsDeletedByItsFindingsKey: an
// entry another writer put under the lock prefix, without a lease, is an
// immortal lock to the detectors, named by its whole etcd key; the
// console's button sends that key. It answered 404 ("no lock") while the
// finding stayed. Now it is deleted; one with a lease is refused (409).
func TestRemediation_Etcd_AnEntryOfAnotherWriterIsDeletedByItsFindingsKey(t *testing.T) {
	e := testenv.NewEtcd(t)
	ec := testenv.NewEtcdClient(t, e.Endpoints()...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	foreign, leased := etcdlock.DefaultPrefix+"orders/42", etcdlock.DefaultPrefix+"orders/43"
	if _, err := ec.Put(ctx, foreign, `{"owner":"another library"}`); err != nil {
		t.Fatal(err)
	}
	g, err := ec.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ec.Put(ctx, leased, "x", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("agent")
	cfg.Etcd = e.Endpoints()
	cfg.RemediationToken = "t0k"
	a := start(t, cfg)
	var key string
	waitFor(t, "the immortal finding of the foreign entry", func() bool {
		for _, f := range findings(t, a).Findings {
			if f.Kind == detectors.KindImmortal {
				key = f.Key
				return true
			}
		}
		return false
	})
	if key != foreign {
		t.Fatalf("the finding names %q, want %q", key, foreign)
	}
	if code, body := del(t, a, "key="+url.QueryEscape(leased), "t0k"); code != 409 {
		t.Errorf("leased foreign entry: %d %s, want 409", code, body)
	}
	if code, body := del(t, a, "key="+url.QueryEscape(key), "t0k"); code != 200 {
		t.Fatalf("foreign immortal entry: %d %s, want 200", code, body)
	}
	if resp, _ := ec.Get(ctx, foreign); len(resp.Kvs) != 0 {
		t.Error("the foreign entry is still there")
	}
	if resp, _ := ec.Get(ctx, leased); len(resp.Kvs) != 1 {
		t.Error("the leased foreign entry was deleted")
	}
	if code, body := del(t, a, "key="+url.QueryEscape(key), "t0k"); code != 404 {
		t.Errorf("deleted again: %d %s, want 404", code, body)
	}
}

// remediationConfig is testConfig(id) for an agent on Redis r with
// remediation on (token; "" leaves it off).
func remediationConfig(id string, r *testenv.Redis, token string) Config {
	cfg := testConfig(id)
	cfg.Redis = []string{"redis://" + r.Addr()}
	cfg.RemediationToken = token
	return cfg
}

// redisWithImmortalLock starts a Redis in which key holds value with no
// TTL (an immortal lock) and returns it with a client of it.
func redisWithImmortalLock(t *testing.T, ctx context.Context, key, value string) (*testenv.Redis, *redis.Client) {
	t.Helper()
	r := testenv.NewRedis(t)
	c := r.Client(t)
	if err := c.Set(ctx, key, value, 0).Err(); err != nil {
		t.Fatal(err)
	}
	return r, c
}

// immortalLockAgent starts redis-server with key held by an immortal lock
// (no TTL) of value, and an agent with remediation on that logs to the
// returned buffer, with hook on its Redis client and the remediation
// script already loaded (so that the script's first call is an EVALSHA
// that runs, not a NOSCRIPT answered by EVAL).
func immortalLockAgent(t *testing.T, key, value string, hook redis.Hook) (*Agent, *redis.Client, *syncBuf, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, c := redisWithImmortalLock(t, ctx, key, value)
	logs := &syncBuf{}
	cfg := remediationConfig("agent-on", r, "s3cr3t-remediation")
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	a := start(t, cfg)
	a.stores[0].redis.AddHook(hook)
	if err := remediateScript.Load(ctx, a.stores[0].redis).Err(); err != nil {
		t.Fatal(err)
	}
	return a, c, logs, cfg.RemediationToken
}

// TestRemediation_ResentDeleteIsStillLogged: the delete script ran, its reply
// was lost, and go-redis resent it. The resend finds the lock gone: the agent
// must not answer "changed, not deleted" (409) and log nothing for a lock
// that this request deleted. It answers 410 and writes the audit line.
func TestRemediation_ResentDeleteIsStillLogged(t *testing.T) {
	h := &testenv.ResendOnce{SHA: remediateScript.Hash()}
	a, c, logs, token := immortalLockAgent(t, "lock:order:2", "tok-immortal 7 {\"service\":\"billing\",\"pid\":1}", h)
	h.Arm()
	code, body := del(t, a, "key=lock:order:2", token)
	if !h.Resent() {
		t.Fatal("the delete script was not run twice: the scenario did not happen")
	}
	if code != http.StatusGone || !strings.Contains(body, "deleted it") {
		t.Fatalf("resent delete: %d %s, want 410 saying this request may have deleted it", code, body)
	}
	if n, _ := c.Exists(context.Background(), "lock:order:2").Result(); n != 0 {
		t.Fatal("the immortal lock is still there")
	}
	if !strings.Contains(logs.String(), "the immortal lock is gone, deleted by this request") || !strings.Contains(logs.String(), "lock:order:2") {
		t.Fatalf("the deletion left no audit line:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "tok-immortal") {
		t.Fatalf("the owner token is in the log:\n%s", logs.String())
	}
}

// TestRemediation_LockChangedBeforeTheDelete: between the agent's read of
// the immortal lock and its delete, the holder released it (the agent cannot
// tell that from its own resent delete: 410, and the possible deletion is
// logged), or a new holder took the key (409, and the new holder's lock is
// not deleted). The delete never reports 200 for a lock it did not delete.
// With If-Match of the version read, a new immortal holder is 412 (the lock
// is no longer at that version), and the same value given a TTL is 409 (its
// version is unchanged, but it expires by itself now); before, the
// precondition was not looked at: 409 for both.
func TestRemediation_LockChangedBeforeTheDelete(t *testing.T) {
	const value = "tok-immortal 8 {\"service\":\"billing\",\"pid\":1}"
	for _, tc := range []struct {
		name      string
		meanwhile func(ctx context.Context, c *redis.Client) error
		ifMatch   bool // send the version of value as If-Match
		code      int
		body      string
		left      int64 // keys named lock:order:3 after the delete
	}{
		{"released", func(ctx context.Context, c *redis.Client) error { return c.Del(ctx, "lock:order:3").Err() },
			false, http.StatusGone, "released it meanwhile", 0},
		{"taken by a new holder", func(ctx context.Context, c *redis.Client) error {
			return c.Set(ctx, "lock:order:3", "tok-new 9 {\"service\":\"billing\",\"pid\":2}", 10*time.Second).Err()
		}, false, http.StatusConflict, "the lock changed", 1},
		{"taken by a new immortal holder, with If-Match", func(ctx context.Context, c *redis.Client) error {
			return c.Set(ctx, "lock:order:3", "tok-new 9 {\"service\":\"billing\",\"pid\":2}", 0).Err()
		}, true, http.StatusPreconditionFailed, "after the agent read it", 1},
		{"given a TTL, with If-Match", func(ctx context.Context, c *redis.Client) error {
			return c.Expire(ctx, "lock:order:3", time.Minute).Err()
		}, true, http.StatusConflict, "TTL", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var c *redis.Client // set before the hook can run: del comes after immortalLockAgent
			h := &testenv.BeforeScript{SHA: remediateScript.Hash(), Do: func() {
				if err := tc.meanwhile(ctx, c); err != nil {
					t.Error(err)
				}
			}}
			a, client, logs, token := immortalLockAgent(t, "lock:order:3", value, h)
			c = client
			var ifMatch []string
			if tc.ifMatch {
				ifMatch = []string{quoted(sha1hex(value))}
			}
			code, body := delIfMatch(t, a, "key=lock:order:3", token, ifMatch...)
			if !h.Done() {
				t.Fatal("nothing happened before the delete: the scenario did not happen")
			}
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Fatalf("delete: %d %s, want %d %q", code, body, tc.code, tc.body)
			}
			if n, _ := c.Exists(ctx, "lock:order:3").Result(); n != tc.left {
				t.Fatalf("%d keys lock:order:3 after the delete, want %d", n, tc.left)
			}
			if tc.code == http.StatusGone && (!strings.Contains(logs.String(), "the immortal lock is gone") || !strings.Contains(logs.String(), "lock:order:3")) {
				t.Fatalf("no audit line:\n%s", logs.String())
			}
			if strings.Contains(logs.String(), "deleted an immortal lock") {
				t.Fatalf("a deletion logged for a lock the agent did not delete:\n%s", logs.String())
			}
		})
	}
}

// TestRemediation_Etcd_AnEntryThatChangesBeforeTheDeleteIsKept: between the
// agent's read of an immortal entry, etcdlock's or another writer's, and its
// delete, the entry is put again (another value, the same value, the same
// value under a lease) or deleted. The delete is one transaction on the mod
// revision, value and lease it read: a changed entry is kept (the API's
// 409), and a gone one is errGone (410, as on Redis), not "changed". With
// the version read as the precondition (If-Match), a changed entry is
// errVersion (412: it is no longer at that version); before, the
// precondition was not looked at after the read: 409.
func TestRemediation_Etcd_AnEntryThatChangesBeforeTheDeleteIsKept(t *testing.T) {
	e := testenv.NewEtcd(t)
	ec := testenv.NewEtcdClient(t, e.Endpoints()...)
	var armed atomic.Pointer[func(context.Context)]
	// The agent's client, with the change made just before its delete
	// transaction leaves.
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if method == "/etcdserverpb.KV/Txn" {
					if f := armed.Swap(nil); f != nil {
						(*f)(ctx)
					}
				}
				return invoke(ctx, method, req, reply, cc, opts...)
			})}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := &Agent{lister: &lister{match: policy.NewMatcher(nil), now: time.Now}}
	s := &store{name: "etcd", etcd: c}
	const value = `{"owner":"another library"}`
	for _, entry := range []struct{ name, key, etcdKey string }{
		{"another writer's entry", etcdlock.DefaultPrefix + "orders/42", etcdlock.DefaultPrefix + "orders/42"},
		{"etcdlock's entry", "lock:b", etcdlock.DefaultPrefix + "lock:b\x00" + "00000000000000ff"},
	} {
		for _, tc := range []struct {
			name      string
			meanwhile func(ctx context.Context, k string) error
			deleted   bool
			gone      bool // the API's 410
			leased    bool // the entry left has a lease
			ifMatch   bool // the version put is the precondition
			version   bool // errVersion: the API's 412
		}{
			{"nothing", func(context.Context, string) error { return nil }, true, false, false, false, false},
			{"another value", func(ctx context.Context, k string) error { _, err := ec.Put(ctx, k, `{"owner":"new"}`); return err }, false, false, false, false, false},
			{"the same value", func(ctx context.Context, k string) error { _, err := ec.Put(ctx, k, value); return err }, false, false, false, false, false},
			{"the same value under a lease", func(ctx context.Context, k string) error {
				g, err := ec.Grant(ctx, 600)
				if err == nil {
					_, err = ec.Put(ctx, k, value, clientv3.WithLease(g.ID))
				}
				return err
			}, false, false, true, false, false},
			{"deleted", func(ctx context.Context, k string) error { _, err := ec.Delete(ctx, k); return err }, false, true, false, false, false},
			{"nothing, with If-Match", func(context.Context, string) error { return nil }, true, false, false, true, false},
			{"the same value, with If-Match", func(ctx context.Context, k string) error { _, err := ec.Put(ctx, k, value); return err }, false, false, false, true, true},
		} {
			t.Run(entry.name+"/"+tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				put, err := ec.Put(ctx, entry.etcdKey, value)
				if err != nil {
					t.Fatal(err)
				}
				want := ""
				if tc.ifMatch {
					want = strconv.FormatInt(put.Header.Revision, 10)
				}
				ran := false
				f := func(context.Context) {
					ran = true
					if err := tc.meanwhile(ctx, entry.etcdKey); err != nil {
						t.Error(err)
					}
				}
				armed.Store(&f)
				_, deleted, err := a.deleteImmortalEtcd(ctx, s, entry.key, want)
				if !ran {
					t.Fatal("no delete transaction ran: the scenario did not happen")
				}
				if deleted != tc.deleted || errors.Is(err, errGone) != tc.gone || errors.Is(err, errVersion) != tc.version || (err != nil && !tc.gone && !tc.version) {
					t.Errorf("deleted %v, err %v; want deleted %v, gone %v, not at the version %v", deleted, err, tc.deleted, tc.gone, tc.version)
				}
				resp, err := ec.Get(ctx, entry.etcdKey)
				if err != nil {
					t.Fatal(err)
				}
				if left := len(resp.Kvs) == 1; left != (!tc.deleted && !tc.gone) {
					t.Errorf("entry left: %v, want %v", left, !tc.deleted && !tc.gone)
				} else if left && (resp.Kvs[0].Lease != 0) != tc.leased {
					t.Errorf("the entry left has lease %x", resp.Kvs[0].Lease)
				}
				if _, err := ec.Delete(ctx, entry.etcdKey); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
