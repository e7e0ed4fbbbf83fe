package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/lockgov/lockgov/instrument/lockvalue"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print lockgov's version (the module version from the build information)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "lockgov %s %s %s/%s\n", lockvalue.Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
