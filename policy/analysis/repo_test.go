package analysis

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockgov/lockgov/internal/buildflags"
)

// repoRoot is the root of the lockgov repository.
const repoRoot = "../.."

// TestOwnTree_NoFindings: lockgov's own code and examples, the opt-in
// analyzer included, give no findings (fixtures live under testdata, which
// ./... does not match). Examples with a go.mod of their own are checked
// as the modules they are.
func TestOwnTree_NoFindings(t *testing.T) {
	mods, err := filepath.Glob(filepath.Join(repoRoot, "examples", "*", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{repoRoot}
	for _, m := range mods {
		dirs = append(dirs, filepath.Dir(m))
	}
	// The packages load from export data that go list compiles: with this
	// test binary's -race, go vet and go test compiled it already
	// (internal/buildflags).
	env := buildflags.Env(nil)
	for _, dir := range dirs {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		findings, err := Vet(ctx, Options{Dir: dir, Patterns: []string{"./..."}, Enable: OptIn(), Env: env})
		cancel()
		if err != nil {
			t.Fatalf("vet %s/...: %v", dir, err)
		}
		for _, f := range findings {
			t.Errorf("%s: %s", dir, f)
		}
	}
}

// TestLibrariesDoNotImportTools holds the decision to keep this package in
// the root module: a service that imports instrument or snowflake builds
// without golang.org/x/tools, and the analyzers recognise the lock
// libraries by import path, without linking them.
func TestLibrariesDoNotImportTools(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to list dependencies: %v", err)
	}
	deps := func(pkgs ...string) []string {
		cmd := exec.Command(goBin, append([]string{"list", "-deps"}, pkgs...)...)
		cmd.Dir = repoRoot
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %v: %v", pkgs, err)
		}
		return strings.Fields(string(out))
	}
	for _, d := range deps("./instrument/...", "./snowflake/...", "./policy") {
		if strings.HasPrefix(d, "golang.org/x/tools") {
			t.Errorf("library dependency %s: every service importing lockgov would build it", d)
		}
	}
	for _, d := range deps("./policy/analysis") {
		if strings.Contains(d, "go-redis") || strings.Contains(d, "go.etcd.io") || strings.Contains(d, "redsync") ||
			strings.Contains(d, "bsm/redislock") || strings.Contains(d, "lockgov/lockgov/instrument") {
			t.Errorf("policy/analysis depends on %s: it recognises lock libraries by import path and must not link them", d)
		}
	}
}
