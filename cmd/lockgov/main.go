// Command lockgov is lockgov's one binary: lockgov <command> [arguments].
//
// Commands are github.com/spf13/cobra commands, one file each, added to the
// root by newRoot. Exit status: 0 success (and --help), 1 failure, 2 bad
// usage — including lockgov, lockgov id, lockgov locks and lockgov
// completion without a command, which print their help to stderr.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// UsageError marks an error that is the caller's (bad arguments): exit
// status 2, like the flag package. Commands return it through Usagef or by
// wrapping.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError.
func Usagef(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

// errShownHelp is the UsageError of a command run without its subcommand:
// the help is the message.
var errShownHelp = UsageError{errors.New("")}

func main() {
	// go vet -vettool=lockgov speaks go vet's protocol, not a command line:
	// hand over before cobra parses anything.
	if isVetTool(os.Args[1:]) {
		runVetTool() // does not return
	}
	routeRedisLog(os.Stderr)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var ue UsageError
	if errors.As(err, &ue) {
		if ue != errShownHelp {
			fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
		}
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
	return 1
}

// newRoot builds the command tree.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "lockgov",
		Short: "lock governance for Redis and etcd: governed locks, Snowflake IDs, the agent, vet",
		Long: `lockgov governs the locks and Snowflake IDs of Go services on Redis and etcd.

Run "lockgov agent" to watch the stores, "lockgov locks ls" to see the locks,
"lockgov vet ./..." to check code. Flags an operator sets per deployment also
come from the environment: LOCKGOV_REDIS, LOCKGOV_ETCD, LOCKGOV_LISTEN,
LOCKGOV_POLICY, LOCKGOV_INTERVAL, LOCKGOV_CONFIG, LOCKGOV_REMEDIATION_TOKEN.`,
		Args:          noCommand,
		RunE:          showHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return UsageError{err} })
	root.AddCommand(newAgentCmd(), newDemoCmd(), newGenerateCmd(), newIDCmd(), newLocksCmd(), newVetCmd(), newVersionCmd())
	// The completion command, made now rather than at Execute, so that
	// it too answers an unknown shell or an extra argument with exit 2.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Args, c.RunE = noCommand, showHelp
		}
	}
	usageArgs(root)
	return root
}

// usageArgs makes the argument checks of cmd and its subcommands
// (cobra.NoArgs, cobra.ExactArgs) usage errors: an argument a command does
// not take, or a missing one, is bad usage (exit 2), not a failure.
func usageArgs(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			err := check(c, args)
			var ue UsageError
			if err != nil && !errors.As(err, &ue) {
				return UsageError{err}
			}
			return err
		}
	}
	for _, sub := range cmd.Commands() {
		usageArgs(sub)
	}
}

// noCommand refuses arguments that name no command.
func noCommand(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return Usagef("unknown command %q (see %s --help)", args[0], cmd.CommandPath())
	}
	return nil
}

// showHelp prints the help of a command that needs a subcommand to stderr
// and exits 2.
func showHelp(cmd *cobra.Command, _ []string) error {
	cmd.SetOut(cmd.ErrOrStderr())
	_ = cmd.Help()
	return errShownHelp
}

// envFlags fills each named flag that the command line did not set from
// its environment variable. A list flag takes a space-separated list.
func envFlags(fs *pflag.FlagSet, vars map[string]string) error {
	for name, env := range vars {
		f := fs.Lookup(name)
		v, ok := os.LookupEnv(env)
		if f == nil || f.Changed || !ok || v == "" {
			continue
		}
		items := []string{v}
		if strings.HasSuffix(f.Value.Type(), "Array") || strings.HasSuffix(f.Value.Type(), "Slice") {
			items = strings.Fields(v)
		}
		for _, item := range items {
			if err := fs.Set(name, item); err != nil {
				return Usagef("%s: %v", env, err)
			}
		}
	}
	return nil
}
