package agent

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/policy"
)

// FuzzParseConfig holds that ParseConfig never panics, that a refusal is
// nothing but *policy.Error values naming the file and saying what is
// wrong, that no password is ever taken from the file, and that an
// accepted config written back as YAML parses to the same Config.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"redis:\n  - redis://localhost:6380\ninterval: soon\nlisten: [a]\nfrobnicate: 1\netcd: ftp://x:1\npolicy: a.yaml\npolicy: b.yaml\n",
		"redis: redis://a:1\netcd: a:2379,b:2379\ninterval: 5s\npatterns: [\"lock:*\", \"mutex:*\"]\n",
		"redis: rediss://u:p@a:1\nredis_auth: {username: agent, password_file: /run/pw, tls_ca: ca.pem, tls_cert: c.pem, tls_key: k.pem}\n",
		"etcd: https://a:2379\netcd_auth: {tls_ca: ca.pem, tls_server_name: etcd.internal}\n",
		"redis_auth: {password: hunter2}\n",
		"redis_auth: {tls_cert: c.pem}\n",
		"redis_auth: [a]\n",
		"redis: redis-sentinel://s1:26379,s2:26379/mymaster\nscan_timeout: 1s\ndata_dir: /tmp/x\nid: agent-1\n",
		"redis: redis://a:1?cluster=2\n",
		"- a\n",
		"",
		"~\n",
		"redis: &r redis://a:1\netcd: *r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "fuzz.yaml"
		cfg, err := ParseConfig(name, data)
		if err != nil {
			if cfg != nil {
				t.Fatalf("ParseConfig returned a config with error %v", err)
			}
			errs := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			}
			for _, e := range errs {
				var pe *policy.Error
				if !errors.As(e, &pe) || pe.File != name || strings.TrimSpace(pe.Problem) == "" {
					t.Fatalf("error %v (%T) does not name the file and the problem", e, e)
				}
			}
			return
		}
		if cfg.RedisAuth.Password != "" || cfg.EtcdAuth.Password != "" || cfg.RemediationToken != "" {
			t.Fatalf("a secret was read from the config file: %+v", cfg)
		}
		text, ok := formatConfig(cfg)
		if !ok {
			return
		}
		again, err := ParseConfig("again.yaml", []byte(text))
		if err != nil {
			t.Fatalf("the formatted config does not parse: %v\n%s", err, text)
		}
		if !reflect.DeepEqual(cfg, again) {
			t.Fatalf("parse(format(c)) != c:\n%+v\n%+v\n%s", cfg, again, text)
		}
	})
}

// formatConfig writes c as YAML, every string double-quoted and every list
// as a list. It reports false when a string has no YAML form.
func formatConfig(c *Config) (string, bool) {
	var b strings.Builder
	ok := true
	q := func(s string) string {
		if !isYAMLText(s) {
			ok = false
		}
		return strconv.Quote(s)
	}
	list := func(name string, items []string) {
		if items == nil {
			return
		}
		b.WriteString(name + ":\n")
		for _, it := range items {
			b.WriteString("  - " + q(it) + "\n")
		}
	}
	str := func(name, v string) {
		if v != "" {
			b.WriteString(name + ": " + q(v) + "\n")
		}
	}
	auth := func(name string, a StoreAuth) {
		if a == (StoreAuth{}) {
			return
		}
		b.WriteString(name + ":\n")
		for _, kv := range [][2]string{{"username", a.Username}, {"password_file", a.PasswordFile}, {"tls_ca", a.CAFile},
			{"tls_cert", a.CertFile}, {"tls_key", a.KeyFile}, {"tls_server_name", a.ServerName}} {
			b.WriteString("  " + kv[0] + ": " + q(kv[1]) + "\n")
		}
	}
	dur := func(name string, d time.Duration) {
		if d != 0 {
			b.WriteString(name + ": " + d.String() + "\n")
		}
	}
	list("redis", c.Redis)
	auth("redis_auth", c.RedisAuth)
	list("etcd", c.Etcd)
	auth("etcd_auth", c.EtcdAuth)
	str("policy", c.Policy)
	str("listen", c.Listen)
	dur("interval", c.Interval)
	dur("scan_timeout", c.ScanTimeout)
	list("patterns", c.Patterns)
	str("data_dir", c.DataDir)
	str("id", c.ID)
	return b.String(), ok
}

// isYAMLText reports whether strconv.Quote's form of s is also a YAML
// double-quoted scalar with the same value: valid UTF-8 and printable
// (Quote's \x escapes mean bytes to Go but code points to YAML).
func isYAMLText(s string) bool {
	return strings.ToValidUTF8(s, "") == s && !strings.Contains(strconv.Quote(s), `\x`)
}

// FuzzRedisURL holds that ParseRedisURL never repeats the password of the
// URL it is given, in its error or in the store's name, and names what is
// wrong.
func FuzzRedisURL(f *testing.F) {
	for _, s := range []string{
		"redis://user:s3cretpw@127.0.0.1:6380/0",
		"rediss://:s3cretpw@host:6380?dial_timeout=1s",
		"redis://user:s3cretpw@host:6380?cluster=2",
		"redis-sentinel://user:s3cretpw@s1:26379,s2:26379/master",
		"redis://user:s3cretpw@host:6380/notanumber",
		"redis://user:s3cretpw@host:6380?protocol=s3cretpw",
		"ftp://user:s3cretpw@host:1",
		"redis://user:s3cret%zz@host:1",
		"user:s3cretpw@host:6380",
		"redis://user:s3cretpw@[::1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		t0, err := ParseRedisURL(raw)
		pw := urlPassword(raw)
		if err != nil {
			if pw != "" && strings.Contains(err.Error(), pw) {
				t.Fatalf("ParseRedisURL(%q) error %q repeats the password %q", raw, err, pw)
			}
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatalf("ParseRedisURL(%q): empty error", raw)
			}
			return
		}
		if pw != "" && strings.Contains(t0.Name, pw) {
			t.Fatalf("ParseRedisURL(%q) name %q shows the password %q", raw, t0.Name, pw)
		}
	})
}

// urlPassword returns the password between "://user:" and the last '@'
// before the host, when it is long enough and appears nowhere else in raw,
// so that finding it in a message is not a coincidence.
func urlPassword(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		rest = raw
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 || strings.ContainsAny(rest[:at], "/?#") {
		return ""
	}
	_, pw, ok := strings.Cut(rest[:at], ":")
	if !ok || len(pw) < 6 || strings.Count(raw, pw) != 1 {
		return ""
	}
	return pw
}
