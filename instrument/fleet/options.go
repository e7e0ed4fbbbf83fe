package fleet

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockgov/lockgov/instrument/lockvalue"
	"github.com/lockgov/lockgov/policy"
)

// Option configures a publisher (see Attach).
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	instance, service string
	host              string
	interval, timeout time.Duration
	now               func() time.Time
	tiers             policy.SkewTiers
	logger            *slog.Logger
	reg               prometheus.Registerer
}

// WithInstance names this process in the fleet (default host name plus pid,
// "host-1234"). It is the heartbeat's key: two live processes must not
// share one.
func WithInstance(name string) Option { return optionFunc(func(c *config) { c.instance = name }) }

// WithService sets the service name the heartbeat carries.
func WithService(name string) Option { return optionFunc(func(c *config) { c.service = name }) }

// WithInterval sets how often the heartbeat is written (default
// DefaultPeriod). It lives three intervals.
func WithInterval(d time.Duration) Option { return optionFunc(func(c *config) { c.interval = d }) }

// WithTimeout bounds each beat: the clock samples (at most half of it) and
// the write (default half the interval, at most 2s).
func WithTimeout(d time.Duration) Option { return optionFunc(func(c *config) { c.timeout = d }) }

// WithClock replaces the wall clock whose offset to the store is measured
// and that stamps the heartbeat (default time.Now): tests and the demo run
// a process whose clock is off with it.
func WithClock(now func() time.Time) Option { return optionFunc(func(c *config) { c.now = now }) }

// WithSkewTiers sets the tiers the measured offset is ranked by (default
// the policy defaults: 100ms degrade, 500ms reject).
func WithSkewTiers(t policy.SkewTiers) Option { return optionFunc(func(c *config) { c.tiers = t }) }

// WithLogger sets the logger of the skew-tier warning and of failed beats,
// each at most once a minute (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }

// WithRegisterer registers lockgov_fleet_heartbeats_total and
// lockgov_clock_offset_seconds on r (default: kept, exported nowhere).
func WithRegisterer(r prometheus.Registerer) Option {
	return optionFunc(func(c *config) { c.reg = r })
}

func newConfig(opts []Option) (config, error) {
	c := config{interval: DefaultPeriod}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	c.host, _ = os.Hostname()
	if c.host == "" {
		c.host = "unknown"
	}
	if c.instance == "" {
		c.instance = c.host + "-" + strconv.Itoa(os.Getpid())
	}
	if c.timeout == 0 {
		c.timeout = min(c.interval/2, 2*time.Second)
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	switch {
	case c.interval < 10*time.Millisecond:
		return c, fmt.Errorf("fleet: heartbeat interval %v, want >= 10ms", c.interval)
	case c.timeout <= 0 || c.timeout > c.interval:
		return c, fmt.Errorf("fleet: heartbeat timeout %v, want 0 < timeout <= interval %v", c.timeout, c.interval)
	case len(c.instance) > 200:
		return c, fmt.Errorf("fleet: instance name of %d bytes, want <= 200", len(c.instance))
	}
	for _, r := range c.instance {
		if r < 0x20 || r == 0x7f || r == '*' || r == '?' || r == '[' {
			return c, fmt.Errorf("fleet: instance name %q has a control or glob character", c.instance)
		}
	}
	return c, nil
}

// version is the lockgov version the heartbeat carries.
var version = lockvalue.Version
