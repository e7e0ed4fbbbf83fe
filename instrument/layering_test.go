package instrument_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLayering_LibrariesLinkNoServerAndPolicyNoClient holds the dependency
// rules of docs/ARCHITECTURE.md (its layers section): a service that imports
// instrument or snowflake links no database server and no test harness,
// instrument links no snowflake code, and policy imports no backend client.
func TestLayering_LibrariesLinkNoServerAndPolicyNoClient(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to list dependencies: %v", err)
	}
	deps := func(pkgs ...string) []string {
		out, err := exec.Command(goBin, append([]string{"list", "-deps"}, pkgs...)...).Output()
		if err != nil {
			t.Fatalf("go list -deps %v: %v", pkgs, err)
		}
		return strings.Fields(string(out))
	}
	for _, d := range deps("github.com/lockgov/lockgov/instrument/...", "github.com/lockgov/lockgov/snowflake/...", "github.com/lockgov/lockgov/policy") {
		if strings.Contains(d, "go.etcd.io/etcd/server") || strings.HasSuffix(d, "/internal/testenv") {
			t.Errorf("library dependency %s: a service importing lockgov would link it", d)
		}
	}
	for _, d := range deps("github.com/lockgov/lockgov/instrument") {
		if strings.Contains(d, "lockgov/lockgov/snowflake") {
			t.Errorf("instrument depends on %s: a service using only locks must link no ID code", d)
		}
	}
	for _, d := range deps("github.com/lockgov/lockgov/policy") {
		if strings.Contains(d, "go-redis") || strings.Contains(d, "go.etcd.io") || strings.HasSuffix(d, "lockgov/instrument") {
			t.Errorf("policy depends on %s: it must import no backend client and not instrument", d)
		}
	}
}
