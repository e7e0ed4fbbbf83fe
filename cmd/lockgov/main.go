// Command lockgov is lockgov's one binary: lockgov <command> [arguments].
//
// Each command lives in a file named after it and registers itself in commands from an
// init function, so adding a command is adding a file.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// command is one subcommand: a one-line summary for the usage text and its entry point,
// which gets the arguments after the command name.
type command struct {
	summary string
	run     func(args []string) error
}

// commands is filled by the command files' init functions.
var commands = map[string]command{}

// UsageError marks an error that is the caller's (bad arguments): exit status 2, like the
// flag package. Commands return it through Usagef or by wrapping.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError.
func Usagef(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

func main() {
	if isVetTool(os.Args[1:]) {
		runVetTool() // go vet -vettool=lockgov: does not return
	}
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "lockgov: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if err := cmd.run(args[1:]); err != nil {
		fmt.Fprintf(stderr, "lockgov %s: %v\n", args[0], err)
		var ue UsageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: lockgov <command> [arguments]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %s%s  %s\n", n, strings.Repeat(" ", width-len(n)), commands[n].summary)
	}
}
