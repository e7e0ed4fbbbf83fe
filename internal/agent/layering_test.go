package agent

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLayering_OnlyTheAgentAndTestenvImportTheEtcdServer holds DESIGN.md's
// rule: the embedded etcd is the agent's (and the tests'), imported by no
// other package of the module.
func TestLayering_OnlyTheAgentAndTestenvImportTheEtcdServer(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/lockgov/lockgov/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{
		"github.com/lockgov/lockgov/internal/agent":   true,
		"github.com/lockgov/lockgov/internal/testenv": true,
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, "go.etcd.io/etcd/server/") && !allowed[f[0]] {
				t.Errorf("%s imports %s", f[0], imp)
			}
		}
	}
}
