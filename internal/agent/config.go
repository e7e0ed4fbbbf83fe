package agent

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lockgov/lockgov/policy"
)

// Defaults of Config.
const (
	DefaultListen   = "127.0.0.1:9464"
	DefaultInterval = 15 * time.Second
	// DefaultLockPattern is what the lock inventory scans when the config
	// names no pattern.
	DefaultLockPattern = "lock:*"
)

// Config is what one agent runs with. Fields a file does not set keep their
// zero value; Start applies the defaults.
type Config struct {
	// Redis are the Redis deployments, as URLs (see ParseRedisURL).
	Redis []string
	// Etcd are the endpoints of one etcd cluster, as URLs.
	Etcd []string
	// RedisAuth and EtcdAuth are credentials and TLS files for the stores
	// (redis_auth, etcd_auth in the file).
	RedisAuth StoreAuth
	EtcdAuth  StoreAuth
	// Policy is the policy file (patterns, max TTL and max hold, skew tiers).
	Policy string
	// Listen is the HTTP address (default DefaultListen); port 0 picks one.
	Listen string
	// Interval is the time between scans (default DefaultInterval).
	// ScanTimeout bounds each detector's run and each store's inventory
	// read in one scan (they run side by side), the publication of the
	// scan, and a store's health ping, which is also bounded by half the
	// interval (see /readyz). Unset, it is Interval; set longer than
	// Interval it is an error naming both (a scan must end before the next
	// one is due: Prometheus refuses a scrape_timeout longer than its
	// scrape_interval for the same reason), never cut to Interval in
	// silence.
	Interval    time.Duration
	ScanTimeout time.Duration
	// Patterns are the key patterns the lock inventory scans on Redis
	// (default DefaultLockPattern).
	Patterns []string
	// DataDir holds the embedded etcd's data when no store is given
	// (default os.UserCacheDir()/lockgov/etcd). EmbedClientURL and
	// EmbedPeerURL are its listen URLs (default 127.0.0.1:2379 and :2380).
	DataDir        string
	EmbedClientURL string
	EmbedPeerURL   string
	// EmbedEtcd starts the embedded etcd even when stores are given, as one
	// more store (`lockgov demo` runs on it and on a Redis).
	EmbedEtcd bool `yaml:"-"`
	// ID names this agent in the election (default host:pid).
	ID string
	// RemediationToken turns remediation on: requests that present it as a
	// bearer token may delete immortal locks. Empty: remediation is off.
	RemediationToken string

	// Logger receives the agent's log (default: slog.Default()).
	Logger *slog.Logger `yaml:"-"`
	// Stdout receives the console URL line when the agent is ready
	// (default: os.Stdout).
	Stdout io.Writer `yaml:"-"`

	// scanTimeoutAt is where ParseConfig read ScanTimeout ("agent.yaml:2"),
	// for the error that refuses it longer than the interval: that is
	// decided on the merged config (CheckConfig), since --interval
	// overrides the file's interval.
	scanTimeoutAt string
}

var configFields = []string{"redis", "redis_auth", "etcd", "etcd_auth", "policy", "listen", "interval", "scan_timeout", "patterns", "data_dir", "id"}

// LoadConfig reads the YAML config file at path. Errors name the file, the
// line and the field ("agent.yaml:3: interval: ..."), like the policy's.
// The remediation token is not read from files: give it by flag or
// LOCKGOV_REMEDIATION_TOKEN, so that it does not sit in a config repository.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig parses a YAML config; name is used in error messages. Every
// problem is reported, each a *policy.Error, joined with errors.Join.
func ParseConfig(name string, data []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlError(name, err)
	}
	cfg := &Config{}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind == 0 || isNull(doc) {
		return cfg, nil
	}
	p := &cfgParser{file: name}
	if doc.Kind != yaml.MappingNode {
		p.fail(doc, "", "must be a mapping, got %s", kind(doc))
		return nil, errors.Join(p.errs...)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		if first, dup := seen[k.Value]; dup {
			p.fail(k, k.Value, "duplicate field (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		switch k.Value {
		case "redis":
			cfg.Redis = p.strings(k, v)
			for _, u := range cfg.Redis {
				if _, err := ParseRedisURL(u); err != nil {
					p.fail(k, "redis", "%v", err)
				}
			}
		case "etcd":
			cfg.Etcd = p.strings(k, v)
			if _, err := parseEtcdEndpoints(cfg.Etcd); err != nil {
				p.fail(k, "etcd", "%v", err)
			}
		case "redis_auth":
			cfg.RedisAuth = p.auth(k, v)
		case "etcd_auth":
			cfg.EtcdAuth = p.auth(k, v)
		case "policy":
			cfg.Policy = p.str(k, v)
		case "listen":
			cfg.Listen = p.str(k, v)
			if cfg.Listen != "" {
				if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
					p.fail(k, "listen", "%q: %v", cfg.Listen, err)
				}
			}
		case "interval":
			cfg.Interval = p.duration(k, v)
		case "scan_timeout":
			cfg.ScanTimeout = p.duration(k, v)
			cfg.scanTimeoutAt = fmt.Sprintf("%s:%d", name, k.Line)
		case "patterns":
			cfg.Patterns = p.strings(k, v)
			if slices.Contains(cfg.Patterns, "") {
				p.fail(k, "patterns", "an empty pattern (want Redis SCAN patterns such as lock:*)")
			}
		case "data_dir":
			cfg.DataDir = p.str(k, v)
		case "id":
			cfg.ID = p.str(k, v)
		default:
			p.fail(k, k.Value, "unknown field (known: %s)", strings.Join(configFields, ", "))
		}
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return cfg, nil
}

type cfgParser struct {
	file string
	errs []error
}

func (p *cfgParser) fail(n *yaml.Node, field, format string, args ...any) {
	p.errs = append(p.errs, &policy.Error{File: p.file, Line: n.Line, Field: field, Problem: fmt.Sprintf(format, args...)})
}

func (p *cfgParser) str(k, v *yaml.Node) string { return p.strAt(k.Value, k, v) }

// strAt is str for a field whose path is not its key (redis_auth.username).
func (p *cfgParser) strAt(field string, k, v *yaml.Node) string {
	if v.Kind != yaml.ScalarNode || isNull(v) {
		p.fail(k, field, "must be a string, got %s", kind(v))
		return ""
	}
	return v.Value
}

// auth parses a redis_auth or etcd_auth mapping. A password is refused:
// it belongs in password_file or the environment, not in a config file.
func (p *cfgParser) auth(k, v *yaml.Node) StoreAuth {
	var a StoreAuth
	if v.Kind != yaml.MappingNode {
		p.fail(k, k.Value, "must be a mapping (%s), got %s", strings.Join(authFields, ", "), kind(v))
		return a
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		fk, fv := v.Content[i], v.Content[i+1]
		field := k.Value + "." + fk.Value
		if first, dup := seen[fk.Value]; dup {
			p.fail(fk, field, "duplicate field (first at line %d)", first)
			continue
		}
		seen[fk.Value] = fk.Line
		switch fk.Value {
		case "username":
			a.Username = p.strAt(field, fk, fv)
		case "password_file":
			a.PasswordFile = p.strAt(field, fk, fv)
		case "tls_ca":
			a.CAFile = p.strAt(field, fk, fv)
		case "tls_cert":
			a.CertFile = p.strAt(field, fk, fv)
		case "tls_key":
			a.KeyFile = p.strAt(field, fk, fv)
		case "tls_server_name":
			a.ServerName = p.strAt(field, fk, fv)
		case "password":
			p.fail(fk, field, "not read from files: use password_file, or LOCKGOV_%s_PASSWORD", strings.ToUpper(strings.TrimSuffix(k.Value, "_auth")))
		default:
			p.fail(fk, field, "unknown field (known: %s)", strings.Join(authFields, ", "))
		}
	}
	if (a.CertFile == "") != (a.KeyFile == "") {
		p.fail(k, k.Value, "tls_cert and tls_key go together (one is empty)")
	}
	return a
}

// strings accepts a list of strings or one string (a comma-separated list
// for etcd endpoints, as on the command line).
func (p *cfgParser) strings(k, v *yaml.Node) []string {
	switch {
	case v.Kind == yaml.ScalarNode && !isNull(v):
		return SplitList(v.Value)
	case v.Kind == yaml.SequenceNode:
		var out []string
		for _, item := range v.Content {
			if item.Kind != yaml.ScalarNode || isNull(item) {
				p.fail(item, k.Value, "list items must be strings, got %s", kind(item))
				continue
			}
			out = append(out, item.Value)
		}
		return out
	}
	p.fail(k, k.Value, "must be a string or a list of strings, got %s", kind(v))
	return nil
}

func (p *cfgParser) duration(k, v *yaml.Node) time.Duration {
	s := p.str(k, v)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		p.fail(k, k.Value, "%q is not a positive duration (use a Go duration with a unit, e.g. 15s)", s)
		return 0
	}
	return d
}

// SplitList splits a comma-separated list (--etcd endpoints), dropping
// empty items.
func SplitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func yamlError(name string, err error) error {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &policy.Error{File: name, Line: line, Problem: "yaml: " + m[2]}
	}
	return &policy.Error{File: name, Problem: err.Error()}
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func kind(n *yaml.Node) string {
	switch {
	case isNull(n):
		return "null"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "an unsupported node"
}

// validate checks the merged config (file and flags) and fills defaults.
func (c *Config) validate() error {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Interval < 0 {
		return fmt.Errorf("interval %v: want > 0", c.Interval)
	}
	if err := checkScanTimeout(c.Interval, c.ScanTimeout, c.scanTimeoutAt); err != nil {
		return err
	}
	if c.ScanTimeout == 0 {
		c.ScanTimeout = c.Interval
	}
	if len(c.Patterns) == 0 {
		c.Patterns = []string{DefaultLockPattern}
	}
	if slices.Contains(c.Patterns, "") {
		return errors.New("patterns: an empty pattern")
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = host + ":" + strconv.Itoa(os.Getpid())
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	return nil
}

const scanTimeoutHint = "a scan must end before the next one is due; lower scan_timeout, raise the interval, or leave scan_timeout unset (it is then the interval)"

// checkScanTimeout refuses a scan timeout below zero or longer than the
// interval (its default filled in, --interval applied); 0 is unset. at is
// where the config file set it, if it did.
func checkScanTimeout(interval, scanTimeout time.Duration, at string) error {
	if at != "" {
		at = " (" + at + ")"
	}
	if scanTimeout < 0 {
		return fmt.Errorf("scan_timeout %v%s: want > 0", scanTimeout, at)
	}
	if scanTimeout > interval {
		return fmt.Errorf("scan_timeout %v%s is longer than interval %v: %s", scanTimeout, at, interval, scanTimeoutHint)
	}
	return nil
}

// CheckConfig reports what is wrong with cfg without connecting to
// anything: malformed store URLs (the error names the flag), a bad
// interval or listen address, a scan timeout longer than the interval
// (DefaultInterval when unset), a policy file that does not parse.
func CheckConfig(cfg *Config) error {
	for _, u := range cfg.Redis {
		if _, err := ParseRedisURL(u); err != nil {
			return fmt.Errorf("--redis %w", err)
		}
	}
	if len(cfg.Etcd) > 0 {
		if _, err := parseEtcdEndpoints(cfg.Etcd); err != nil {
			return fmt.Errorf("--etcd %w", err)
		}
	}
	if cfg.Interval < 0 {
		return fmt.Errorf("--interval %v: want > 0", cfg.Interval)
	}
	interval := cfg.Interval
	if interval == 0 {
		interval = DefaultInterval
	}
	if err := checkScanTimeout(interval, cfg.ScanTimeout, cfg.scanTimeoutAt); err != nil {
		return err
	}
	for _, a := range []struct {
		field string
		auth  StoreAuth
	}{{"redis_auth", cfg.RedisAuth}, {"etcd_auth", cfg.EtcdAuth}} {
		if err := a.auth.applyTLS(a.field, &tls.Config{}); err != nil {
			return err // names the field and the file
		}
		if _, err := a.auth.password(a.field); err != nil {
			return err
		}
	}
	if cfg.Policy != "" {
		if _, err := policy.Load(cfg.Policy); err != nil {
			return err // names the file, the line and the field
		}
	}
	if cfg.Listen != "" {
		if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
			return fmt.Errorf("--listen %q: %v", cfg.Listen, err)
		}
	}
	return nil
}
