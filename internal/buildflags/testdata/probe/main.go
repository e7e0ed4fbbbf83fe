// Command probe prints buildflags.Args() for TestArgs_MatchHowThisBinaryWasBuilt.
package main

import (
	"fmt"

	"github.com/lockgov/lockgov/internal/buildflags"
)

func main() { fmt.Print(buildflags.Args()) }
