package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newDemoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "demo [--duration D] [--listen ADDR]",
		Short: "run a demo fleet with the agent and its console (not yet: the next issue's)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("not available yet: the demo and the console come with the next issue; run lockgov agent meanwhile")
		},
	}
}
