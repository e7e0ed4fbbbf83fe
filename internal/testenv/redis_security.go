package testenv

import (
	"bufio"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// adminUser is the ACL user testenv itself connects as (readiness checks,
// Client) when WithRedisACLUser turns the default user off.
const adminUser = "testenv-admin"

// ACLUser is a Redis ACL user: a name, a password and ACL rules such as
// "~lock:*", "&{lock:*", "+eval", "-@all" (Redis's ACL SETUSER syntax).
type ACLUser struct {
	Name, Password string
	Rules          []string
}

type redisSecurity struct {
	tls           bool
	users         []ACLUser
	certs         *Certs
	adminPassword string
}

// WithRedisTLS serves Redis over TLS only (--port 0 --tls-port PORT) with
// certificates testenv generates (Redis.Certs): clients must present the
// client certificate (--tls-auth-clients yes) and trust the test CA.
func WithRedisTLS() RedisOption {
	return redisOptionFunc(func(c *redisConfig) { c.sec.tls = true })
}

// WithRedisACLUser adds an ACL user (--user NAME on >PASSWORD RULES...) and
// turns the default user off, so that every client must authenticate.
// testenv connects as its own administrator (Redis.Client). Repeat the
// option for several users.
func WithRedisACLUser(name, password string, rules ...string) RedisOption {
	return redisOptionFunc(func(c *redisConfig) {
		c.sec.users = append(c.sec.users, ACLUser{Name: name, Password: password, Rules: rules})
	})
}

// secure prepares the certificates and the administrator's password.
func (r *Redis) secure(s redisSecurity) error {
	if !s.tls && len(s.users) == 0 {
		return nil
	}
	for _, u := range s.users {
		if u.Name == "" || u.Name == adminUser || u.Name == "default" || strings.ContainsAny(u.Name+u.Password, " \t\r\n") {
			return fmt.Errorf("testenv: ACL user %q: want a name other than default and %s, without spaces in name or password", u.Name, adminUser)
		}
	}
	r.sec = &s
	if s.tls {
		c, err := GenerateCerts(r.dir)
		if err != nil {
			return fmt.Errorf("testenv: %w", err)
		}
		r.sec.certs = c
	}
	if len(s.users) > 0 {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		r.sec.adminPassword = hex.EncodeToString(b)
	}
	return nil
}

// Certs returns the certificates of a Redis started WithRedisTLS, nil
// otherwise.
func (r *Redis) Certs() *Certs {
	if r.sec == nil {
		return nil
	}
	return r.sec.certs
}

// TLS reports whether the server speaks TLS only.
func (r *Redis) TLS() bool { return r.sec != nil && r.sec.tls }

// ClientOptions returns go-redis options for this server as user (empty:
// no AUTH), with testenv's timeouts and, under WithRedisTLS, the client
// certificate and the test CA.
func (r *Redis) ClientOptions(user, password string) *redis.Options {
	o := &redis.Options{
		Addr:                  r.Addr(),
		Username:              user,
		Password:              password,
		ContextTimeoutEnabled: true,
		DialTimeout:           clientDialTimeout,
		ReadTimeout:           clientIOTimeout,
		WriteTimeout:          clientIOTimeout,
		MaxRetries:            1,
		PoolSize:              clientPoolSize,
	}
	if r.TLS() {
		o.TLSConfig = r.sec.certs.ClientTLS()
	}
	return o
}

func (r *Redis) portArgs() []string {
	if r.TLS() {
		return []string{"--port", "0", "--tls-port", strconv.Itoa(r.port)}
	}
	return []string{"--port", strconv.Itoa(r.port)}
}

func (r *Redis) securityArgs() []string {
	if r.sec == nil {
		return nil
	}
	var args []string
	if c := r.sec.certs; c != nil {
		args = append(args,
			"--tls-cert-file", c.ServerCertFile,
			"--tls-key-file", c.ServerKeyFile,
			"--tls-ca-cert-file", c.CAFile,
			"--tls-auth-clients", "yes")
	}
	if len(r.sec.users) > 0 {
		args = append(args, "--user", "default", "off")
		args = append(args, "--user", adminUser, "on", ">"+r.sec.adminPassword, "~*", "&*", "+@all")
		for _, u := range r.sec.users {
			args = append(args, "--user", u.Name, "on", ">"+u.Password)
			args = append(args, u.Rules...)
		}
	}
	return args
}

// ping checks readiness the way a client would: over TLS when the server
// speaks it, authenticated as the administrator when ACLs are on.
func (r *Redis) ping(addr string, timeout time.Duration) error {
	d := &net.Dialer{Timeout: timeout}
	var conn net.Conn
	var err error
	if r.sec != nil && r.TLS() {
		conn, err = tls.DialWithDialer(d, "tcp", addr, r.sec.certs.ClientTLS())
	} else {
		conn, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	rd := bufio.NewReader(conn)
	if r.sec != nil && r.sec.adminPassword != "" {
		if _, err := io.WriteString(conn, resp("AUTH", adminUser, r.sec.adminPassword)); err != nil {
			return err
		}
		if _, err := readReply(rd); err != nil {
			return fmt.Errorf("AUTH as %s: %w", adminUser, err)
		}
	}
	if _, err := io.WriteString(conn, resp("PING")); err != nil {
		return err
	}
	v, err := readReply(rd)
	if err != nil {
		return err
	}
	if v != "PONG" {
		return fmt.Errorf("unexpected reply to PING: %v", v)
	}
	return r.isOurs(conn, rd)
}

// isOurs checks that the server answering on conn is the one this Redis
// started, by its working directory (a temp dir of its own): a free port
// can be taken by another process's redis-server between FreePort and the
// bind, and ours then exits while that one answers PING — two fuzz workers
// of one package shared a server that way, and a key's first request was
// answered as a replay.
func (r *Redis) isOurs(conn net.Conn, rd *bufio.Reader) error {
	if _, err := io.WriteString(conn, resp("CONFIG", "GET", "dir")); err != nil {
		return err
	}
	v, err := readReply(rd)
	if err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "unknown command") {
			return nil // a Sentinel has no CONFIG; nothing to compare
		}
		return fmt.Errorf("CONFIG GET dir: %w", err)
	}
	kv, ok := v.([]any)
	if !ok || len(kv) != 2 {
		return fmt.Errorf("CONFIG GET dir: unexpected reply %v", v)
	}
	got, _ := kv[1].(string)
	want := r.dir
	if real, err := filepath.EvalSymlinks(want); err == nil {
		want = real
	}
	if got != want && got != r.dir {
		return fmt.Errorf("%w: the server answering on %s runs in %q, not %q (another process's)", errPortInUse, r.Addr(), got, r.dir)
	}
	return nil
}

func resp(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}
