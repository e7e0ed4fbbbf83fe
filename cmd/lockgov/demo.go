package main

import (
	"context"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgov/lockgov/internal/demo"
)

func newDemoCmd() *cobra.Command {
	var cfg demo.Config
	cmd := &cobra.Command{
		Use:   "demo [--duration D] [--listen ADDR]",
		Short: "run the agent and its console on an embedded etcd, with a workload that makes a deadlock, immortal locks, a rejected clock and WorkerID collisions",
		Long: `demo starts the agent on an embedded etcd (and on a private redis-server when
one is on PATH), runs a small workload through instrument.Govern (contention,
an immortal lock, a skewed clock, two instances on one WorkerID, a deadlock),
prints the console URL, and at the end a summary of what the agent found.
Ctrl-C (or SIGTERM) stops it; everything it started is removed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Duration < 0 {
				return Usagef("--duration %v: want >= 0", cfg.Duration)
			}
			if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
				return Usagef("--listen %q: %v", cfg.Listen, err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg.Stdout = cmd.OutOrStdout()
			_, err := demo.Run(ctx, cfg)
			return err
		},
	}
	cmd.Flags().DurationVar(&cfg.Duration, "duration", 0, "how long the demo runs (0: until interrupted)")
	cmd.Flags().StringVar(&cfg.Listen, "listen", "127.0.0.1:0", "HTTP address of the console")
	cmd.Flags().DurationVar(&cfg.Interval, "interval", 2*time.Second, "the agent's scan interval")
	_ = cmd.Flags().MarkHidden("interval")
	return cmd
}
