package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgov/lockgov/internal/agent"
)

// agentEnv maps the agent's flags to environment variables.
var agentEnv = map[string]string{
	"config": "LOCKGOV_CONFIG", "policy": "LOCKGOV_POLICY", "redis": "LOCKGOV_REDIS", "etcd": "LOCKGOV_ETCD",
	"listen": "LOCKGOV_LISTEN", "interval": "LOCKGOV_INTERVAL", "remediation-token": "LOCKGOV_REMEDIATION_TOKEN",
}

type agentFlags struct {
	config, policy, etcd, listen, token, dataDir string
	redis                                        []string
	interval                                     time.Duration
}

func newAgentCmd() *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent [--config FILE] [--policy FILE] [--redis URL]... [--etcd EPS] [--listen ADDR] [--interval D]",
		Short: "watch the stores: leaked locks, clock skew, WorkerID collisions, as metrics and an API",
		Long: `lockgov agent watches Redis and etcd deployments and serves what it finds:
/metrics (OpenMetrics), /healthz, /readyz, /api/v1/findings, /api/v1/locks,
/api/v1/instances. Several agents on the same stores elect one leader; the
others serve the leader's findings.

Stores: --redis URL (repeatable): redis://[user:pass@]host:port[/db],
rediss:// for TLS, redis://host:port?cluster=1 for a Cluster (several such
URLs are seeds of one Cluster), redis-sentinel://host:26379,host:26379/MASTER.
--etcd ENDPOINTS: comma-separated http(s)://[user:pass@]host:port. With no
store the agent starts an embedded single-node etcd (data under the user
cache directory) and logs how to point processes at it.

Flags override the config file; unset flags come from LOCKGOV_CONFIG,
LOCKGOV_POLICY, LOCKGOV_REDIS (space-separated), LOCKGOV_ETCD, LOCKGOV_LISTEN,
LOCKGOV_INTERVAL and LOCKGOV_REMEDIATION_TOKEN. Prefer the environment for the
token: command lines are visible to other users.

Credentials and TLS: the config file's redis_auth and etcd_auth (username,
password_file, tls_ca, tls_cert, tls_key, tls_server_name; TLS files need
rediss:// or https:// URLs). Passwords are never read from the config file:
use password_file, or LOCKGOV_REDIS_PASSWORD and LOCKGOV_ETCD_PASSWORD.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := envFlags(cmd.Flags(), agentEnv); err != nil {
				return err
			}
			cfg, err := f.merge(cmd)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			a, err := agent.Start(ctx, *cfg)
			if err != nil {
				return err
			}
			<-ctx.Done()
			return a.Close()
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.config, "config", "", "YAML config file (flags override it)")
	fs.StringVar(&f.policy, "policy", "", "policy file: key patterns, max TTL and hold, skew tiers")
	fs.StringArrayVar(&f.redis, "redis", nil, "Redis URL (repeatable)")
	fs.StringVar(&f.etcd, "etcd", "", "etcd endpoints, comma-separated")
	fs.StringVar(&f.listen, "listen", agent.DefaultListen, "HTTP address; port 0 picks a free one")
	fs.DurationVar(&f.interval, "interval", agent.DefaultInterval, "time between scans")
	fs.StringVar(&f.token, "remediation-token", "", `turn remediation on: DELETE /api/v1/locks with this bearer token deletes immortal locks (with If-Match: "VERSION", only at the version listed)`)
	fs.StringVar(&f.dataDir, "data-dir", "", "data directory of the embedded etcd (default: user cache dir/lockgov/etcd)")
	return cmd
}

// merge merges the config file with the flags the command line (or the
// environment) set.
func (f *agentFlags) merge(cmd *cobra.Command) (*agent.Config, error) {
	cfg := &agent.Config{}
	if f.config != "" {
		var err error
		if cfg, err = agent.LoadConfig(f.config); err != nil {
			return nil, UsageError{err}
		}
	}
	set := cmd.Flags().Changed
	if set("policy") {
		cfg.Policy = f.policy
	}
	if set("redis") {
		cfg.Redis = f.redis
	}
	if set("etcd") {
		cfg.Etcd = agent.SplitList(f.etcd)
		if len(cfg.Etcd) == 0 {
			return nil, Usagef("--etcd: no endpoint")
		}
	}
	if set("listen") || cfg.Listen == "" {
		cfg.Listen = f.listen
	}
	if set("interval") || cfg.Interval == 0 {
		if f.interval <= 0 {
			return nil, Usagef("--interval %v: want > 0", f.interval)
		}
		cfg.Interval = f.interval
	}
	if set("data-dir") {
		cfg.DataDir = f.dataDir
	}
	cfg.RemediationToken = f.token
	if pw := os.Getenv("LOCKGOV_REDIS_PASSWORD"); pw != "" {
		cfg.RedisAuth.Password = pw
	}
	if pw := os.Getenv("LOCKGOV_ETCD_PASSWORD"); pw != "" {
		cfg.EtcdAuth.Password = pw
	}
	cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	cfg.Stdout = cmd.OutOrStdout()
	if err := agent.CheckConfig(cfg); err != nil {
		return nil, UsageError{err}
	}
	return cfg, nil
}
