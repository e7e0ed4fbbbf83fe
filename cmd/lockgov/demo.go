package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newDemoCmd is a placeholder: the flags are the contract of DESIGN.md, the
// demo itself is the next issue's.
func newDemoCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo [--duration D] [--listen ADDR]",
		Short: "run a demo fleet with the agent and its console (not yet: the next issue's)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("not available yet: the demo and the console come with the next issue; run lockgov agent meanwhile")
		},
	}
	cmd.Flags().Duration("duration", 0, "how long the demo runs (0: until interrupted)")
	cmd.Flags().String("listen", "127.0.0.1:0", "HTTP address of the console")
	return cmd
}
