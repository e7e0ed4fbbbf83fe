package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// store is one deployment the agent watches: a Redis (single, Sentinel or
// Cluster) or an etcd cluster.
type store struct {
	// name is the redacted address: scheme and hosts, never user or password.
	name  string
	redis redis.UniversalClient
	etcd  *clientv3.Client
}

func (s *store) ping(ctx context.Context) error {
	if s.redis != nil {
		if c, ok := s.redis.(*redis.ClusterClient); ok {
			return c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() })
		}
		return s.redis.Ping(ctx).Err()
	}
	// A linearizable read needs a quorum: a partitioned member is down.
	_, err := s.etcd.Get(ctx, "lockgov/agent/ping")
	return err
}

func (s *store) close() error {
	if s.redis != nil {
		return s.redis.Close()
	}
	return s.etcd.Close()
}

// RedisTarget is a parsed --redis URL.
type RedisTarget struct {
	Name     string // redacted: scheme://host[,host...][/db]
	Cluster  bool
	Sentinel bool
	Single   *redis.Options
	ClusterO *redis.ClusterOptions
	Failover *redis.FailoverOptions
}

// ParseRedisURL parses one Redis URL:
//
//	redis://[user:pass@]host:port[/db][?opts]          single node
//	rediss://...                                        the same over TLS
//	redis://host:port?cluster=1[&addr=host:port...]    a Cluster (seeds)
//	redis-sentinel://[user:pass@]h1:26379,h2:26379/MASTER[?opts]  Sentinel
//	rediss-sentinel://...                               Sentinel, TLS to the nodes
//
// Options are go-redis's URL options. The error never repeats the password.
func ParseRedisURL(raw string) (*RedisTarget, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%s: malformed URL: %v", redactRaw(raw), err)
	}
	if u.Host == "" {
		// Without a host, url.Parse may have put user and password into
		// the path: show the raw text with its user info hidden
		// (FuzzRedisURL found "/://:pw@" repeated).
		return nil, fmt.Errorf("%s: want redis://host:port, rediss://, or redis-sentinel://host:port/master", redactRaw(raw))
	}
	shown := redactURL(u)
	q := u.Query()
	t := &RedisTarget{Name: shown}
	switch u.Scheme {
	case "redis", "rediss":
		cluster := q.Get("cluster")
		q.Del("cluster")
		u.RawQuery = q.Encode()
		switch cluster {
		case "", "0", "false":
			t.Single, err = redis.ParseURL(u.String())
		case "1", "true":
			t.Cluster = true
			t.ClusterO, err = redis.ParseClusterURL(u.String())
		default:
			return nil, fmt.Errorf("%s: cluster=%q: want 1 or 0", shown, cluster)
		}
	case "redis-sentinel", "rediss-sentinel":
		t.Sentinel = true
		hosts := strings.Split(u.Host, ",")
		u.Host = hosts[0]
		for _, h := range hosts[1:] {
			q.Add("addr", h)
		}
		if m := strings.Trim(u.Path, "/"); m != "" && q.Get("master_name") == "" {
			q.Set("master_name", m)
		}
		u.Path = ""
		if q.Get("master_name") == "" {
			return nil, fmt.Errorf("%s: a Sentinel URL names the master: redis-sentinel://host:26379/MASTER", shown)
		}
		tlsOn := u.Scheme == "rediss-sentinel"
		u.Scheme = "redis"
		u.RawQuery = q.Encode()
		t.Failover, err = redis.ParseFailoverURL(u.String())
		if err == nil && tlsOn && t.Failover.TLSConfig == nil {
			t.Failover.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	default:
		return nil, fmt.Errorf("%s: scheme %q: want redis, rediss, redis-sentinel or rediss-sentinel", shown, u.Scheme)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %s", shown, hideUserInfo(err, u))
	}
	return t, nil
}

// hideUserInfo returns the text of a go-redis URL error without the URL's
// password: go-redis repeats the whole URL in some parse errors
// (FuzzRedisURL found `parse "redis://:pw@host:A?…": invalid port`).
func hideUserInfo(err error, u *url.URL) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the reason, without the URL
	}
	msg := err.Error()
	if pw, ok := u.User.Password(); ok && pw != "" {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
		msg = strings.ReplaceAll(msg, url.PathEscape(pw), "xxxxx")
		msg = strings.ReplaceAll(msg, url.QueryEscape(pw), "xxxxx")
	}
	return msg
}

// redactURL renders u without user, password or query (query options may
// carry secrets too).
func redactURL(u *url.URL) string {
	s := u.Scheme + "://" + u.Host
	if p := strings.Trim(u.Path, "/"); p != "" {
		s += "/" + p
	}
	return s
}

// redactRaw hides the user info of a string url.Parse refused.
func redactRaw(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if strings.Contains(raw, "@") {
			return "(URL hidden: it may hold a password)"
		}
		return fmt.Sprintf("%q", raw)
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = "xxxxx@" + rest[i+1:]
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest = rest[:i]
	}
	return fmt.Sprintf("%q", scheme+"://"+rest)
}

// openRedis opens the Redis deployments of urls with auth's credentials and
// TLS files. URLs with cluster=1 are seeds of one Cluster.
func openRedis(urls []string, auth StoreAuth) (_ []*store, err error) {
	pw, err := auth.password("redis_auth")
	if err != nil {
		return nil, err
	}
	// secure fills what auth gives into one deployment's options.
	secure := func(name string, tlsCfg *tls.Config, user, pass *string, addrs []string) error {
		if auth.hasTLS() {
			if tlsCfg == nil {
				return fmt.Errorf("--redis %s: redis_auth sets TLS files but the URL is not TLS: use rediss:// (or rediss-sentinel://)", name)
			}
			if err := auth.applyTLS("redis_auth", tlsCfg); err != nil {
				return err
			}
		}
		if *user == "" && *pass == "" {
			*user, *pass = auth.Username, pw
		}
		if tlsCfg != nil {
			for _, a := range addrs {
				if err := probeTLS("--redis "+name, a, tlsCfg); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var out []*store
	defer func() {
		if err != nil {
			for _, s := range out {
				_ = s.close()
			}
		}
	}()
	var cluster *redis.ClusterOptions
	var clusterNames []string
	for _, raw := range urls {
		t, err := ParseRedisURL(raw)
		if err != nil {
			return nil, fmt.Errorf("--redis %w", err)
		}
		switch {
		case t.Cluster && cluster == nil:
			cluster = t.ClusterO
			clusterNames = append(clusterNames, t.Name)
		case t.Cluster:
			cluster.Addrs = append(cluster.Addrs, t.ClusterO.Addrs...)
			clusterNames = append(clusterNames, t.Name)
		case t.Sentinel:
			f := t.Failover
			// Sentinels are reached in plain text unless the URL says TLS;
			// the nodes they name get the TLS configuration.
			if err := secure(t.Name, f.TLSConfig, &f.Username, &f.Password, nil); err != nil {
				return nil, err
			}
			f.ContextTimeoutEnabled = true
			out = append(out, &store{name: t.Name, redis: redis.NewFailoverClient(f)})
		default:
			o := t.Single
			if err := secure(t.Name, o.TLSConfig, &o.Username, &o.Password, []string{o.Addr}); err != nil {
				return nil, err
			}
			o.ContextTimeoutEnabled = true
			out = append(out, &store{name: t.Name, redis: redis.NewClient(o)})
		}
	}
	if cluster != nil {
		name := strings.Join(clusterNames, ",")
		if err := secure(name, cluster.TLSConfig, &cluster.Username, &cluster.Password, cluster.Addrs); err != nil {
			return nil, err
		}
		cluster.ContextTimeoutEnabled = true
		out = append(out, &store{name: name, redis: redis.NewClusterClient(cluster)})
	}
	return out, nil
}

// parseEtcdEndpoints checks --etcd endpoints: URLs (http:// or https://,
// user:password@ for etcd auth) or host:port.
func parseEtcdEndpoints(eps []string) (clientv3.Config, error) {
	var cfg clientv3.Config
	if len(eps) == 0 {
		return cfg, errors.New("no endpoint")
	}
	for _, ep := range eps {
		if !strings.Contains(ep, "://") {
			ep = "http://" + ep
		}
		u, err := url.Parse(ep)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return cfg, fmt.Errorf("%s: malformed URL: %v", redactRaw(ep), err)
		}
		if u.Host == "" || u.Port() == "" {
			return cfg, fmt.Errorf("%s: want host:port or http(s)://host:port", redactURL(u))
		}
		switch u.Scheme {
		case "http":
		case "https":
			cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		default:
			return cfg, fmt.Errorf("%s: scheme %q: want http or https", redactURL(u), u.Scheme)
		}
		if u.User != nil {
			cfg.Username = u.User.Username()
			cfg.Password, _ = u.User.Password()
		}
		cfg.Endpoints = append(cfg.Endpoints, u.Scheme+"://"+u.Host)
	}
	return cfg, nil
}

func openEtcd(eps []string, auth StoreAuth) (*store, error) {
	cfg, err := parseEtcdEndpoints(eps)
	if err != nil {
		return nil, fmt.Errorf("--etcd %w", err)
	}
	if auth.hasTLS() {
		if cfg.TLS == nil {
			return nil, errors.New("--etcd: etcd_auth sets TLS files but the endpoints are not TLS: use https://")
		}
		if err := auth.applyTLS("etcd_auth", cfg.TLS); err != nil {
			return nil, err
		}
	}
	if cfg.Username == "" && cfg.Password == "" && auth.Username != "" {
		if cfg.Password, err = auth.password("etcd_auth"); err != nil {
			return nil, err
		}
		cfg.Username = auth.Username
	}
	if cfg.TLS != nil {
		for _, ep := range cfg.Endpoints {
			if err := probeTLS("--etcd "+trimSchemes([]string{ep})[0], hostPort(ep), cfg.TLS); err != nil {
				return nil, err
			}
		}
	}
	cfg.DialTimeout = 5 * time.Second
	cfg.Logger = zap.NewNop()
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("--etcd: %w", err)
	}
	name := "etcd://" + strings.Join(trimSchemes(cfg.Endpoints), ",")
	return &store{name: name, etcd: c}, nil
}

func trimSchemes(eps []string) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		_, out[i], _ = strings.Cut(e, "://")
	}
	return out
}

// forEachPrimary calls fn on the one node of a single Redis, or on every
// primary of a Cluster in turn (scans are per node).
func forEachPrimary(ctx context.Context, c redis.UniversalClient, fn func(redis.Cmdable) error) error {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return fn(c)
	}
	var primaries []*redis.Client
	var mu sync.Mutex
	if err := cc.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
		mu.Lock()
		primaries = append(primaries, n)
		mu.Unlock()
		return nil
	}); err != nil {
		return err
	}
	for _, n := range primaries {
		if err := fn(n); err != nil {
			return err
		}
	}
	return nil
}
