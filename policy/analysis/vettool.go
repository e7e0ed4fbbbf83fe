package analysis

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"golang.org/x/tools/go/analysis/unitchecker"

	"github.com/lockgov/lockgov/policy"
)

// IsVetTool reports whether args (the arguments after the program name)
// are go vet talking to its -vettool: -V=full to identify the tool,
// -flags to list its flags, or flags followed by a unit's .cfg file.
func IsVetTool(args []string) bool {
	if len(args) == 0 {
		return false
	}
	if args[0] == "-flags" || strings.HasPrefix(args[0], "-V") {
		return true
	}
	last := args[len(args)-1]
	return strings.HasSuffix(last, ".cfg") && (len(args) == 1 || strings.HasPrefix(args[0], "-"))
}

// VetToolMain runs the analyzers as go vet's -vettool (unitchecker) with
// os.Args, and exits. Besides unitchecker's flags (-json, -c, -NAME to run
// only some analyzers) it takes -policy FILE (an absolute path: go vet runs
// the tool in each package's directory), -tests and -enable NAME,...;
// -snowflakeclock also enables that opt-in analyzer.
func VetToolMain() {
	for _, name := range []string{"policy", "tests", "enable"} {
		f := configAnalyzer.Flags.Lookup(name)
		flag.Var(f.Value, name, f.Usage)
	}
	args := os.Args[1:]
	for i, a := range args {
		switch {
		case a == "-snowflakeclock" || a == "-snowflakeclock=true" || a == "--snowflakeclock":
			enableFlag = "snowflakeclock"
		case strings.HasPrefix(a, "-policy=") || strings.HasPrefix(a, "--policy="):
			checkPolicy(a[strings.Index(a, "=")+1:])
		case (a == "-policy" || a == "--policy") && i+1 < len(args):
			checkPolicy(args[i+1])
		}
	}
	unitchecker.Main(All()...)
}

// checkPolicy fails the tool once, clearly, for a policy file that does not
// load, instead of once per analyzer.
func checkPolicy(path string) {
	if _, err := policy.Load(path); err != nil {
		fmt.Fprintf(os.Stderr, "lockgov: -policy: %v\n", err)
		os.Exit(1)
	}
}
