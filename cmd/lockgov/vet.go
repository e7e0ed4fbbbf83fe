package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lockgov/lockgov/policy/analysis"
)

const vetUsage = `usage: lockgov vet [-json] [-policy FILE] [-enable NAME,...] [-tests] [packages]

Runs lockgov's analyzers over the packages (default "."): setnxexpire,
unsafeunlock, blindrenew, nodeadline, missingrelease, globallockkey,
markerbeforewrite, uncheckedtxn, and with -enable the opt-in snowflakeclock.
Prints file:line:col: [analyzer] message (rule: ...), nothing when clean.
Exit status: 0 clean, 1 findings, 2 bad input (a pattern that matches no
package, code that does not compile, a bad policy file).

As go vet's tool: go vet -vettool=$(command -v lockgov) [-policy=/abs/policy.yaml] ./...`

// newVetCmd keeps vet's own flag parsing (single-dash flags, as go vet's),
// so cobra only routes to it.
func newVetCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "vet [-json] [-policy FILE] [-enable NAME,...] [-tests] [packages]",
		Short:              "find lock, ID and token mistakes in Go code",
		Long:               vetUsage,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
				fmt.Fprintln(cmd.OutOrStdout(), vetUsage)
				return nil
			}
			return vetCmd(args, cmd.OutOrStdout())
		},
	}
}

// isVetTool and runVetTool let main hand the process to go vet's protocol.
func isVetTool(args []string) bool {
	if len(args) > 0 {
		if c, _, err := newRoot(io.Discard, io.Discard).Find(args[:1]); err == nil && c.Parent() != nil {
			return false
		}
	}
	return analysis.IsVetTool(args)
}

func runVetTool() { analysis.VetToolMain() }

func vetCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("vet", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print findings as JSON")
	pol := fs.String("policy", "", "policy file: lock keys are the keys its patterns match")
	enable := fs.String("enable", "", "opt-in analyzers to run, comma-separated: snowflakeclock")
	tests := fs.Bool("tests", false, "check _test.go files too")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Usagef("%s", vetUsage)
		}
		return Usagef("%v\n%s", err, vetUsage)
	}
	opts := analysis.Options{Patterns: fs.Args(), Policy: *pol, Tests: *tests}
	for _, n := range strings.Split(*enable, ",") {
		if n = strings.TrimSpace(n); n != "" {
			opts.Enable = append(opts.Enable, n)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	findings, err := analysis.Vet(ctx, opts)
	if err != nil {
		if errors.Is(err, analysis.ErrInput) {
			return UsageError{err}
		}
		return err
	}
	if *asJSON {
		err = analysis.WriteJSON(stdout, findings)
	} else {
		err = analysis.WriteText(stdout, findings)
	}
	if err != nil {
		return err
	}
	if len(findings) > 0 {
		return fmt.Errorf("%d finding(s)", len(findings))
	}
	return nil
}
