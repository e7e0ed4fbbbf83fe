package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newGenerateCmd is a placeholder: the flags are the contract of DESIGN.md,
// the generator is the next issue's.
func newGenerateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "generate --out DIR [--format plain|operator] [--check DIR]",
		Short: "write Grafana dashboards and Prometheus rules (not yet: the next issue's)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("not available yet: dashboards and alert rules come with the next issue")
		},
	}
	cmd.Flags().String("out", "", "directory to write into")
	cmd.Flags().String("format", "plain", "plain files or operator manifests (GrafanaDashboard, PrometheusRule)")
	cmd.Flags().String("check", "", "exit non-zero when this GitOps directory is stale")
	return cmd
}
