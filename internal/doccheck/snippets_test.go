package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"

	"github.com/lockgov/lockgov/internal/buildflags"
)

// snippet is one ```go block of a markdown file.
type snippet struct {
	where string // file:line of its first line
	code  string
}

// goSnippets returns the ```go blocks of the markdown files.
func goSnippets(t *testing.T, files ...string) []snippet {
	t.Helper()
	var out []snippet
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel("../..", f)
		var cur *snippet
		for i, line := range strings.Split(string(data), "\n") {
			trimmed := strings.TrimSpace(line)
			switch {
			case cur == nil && trimmed == "```go":
				cur = &snippet{where: fmt.Sprintf("%s:%d", filepath.ToSlash(rel), i+2)}
			case cur != nil && trimmed == "```":
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				cur.code += line + "\n"
			}
		}
	}
	return out
}

// elided is the "{ ... }" a snippet writes for "handle the error".
var elided = regexp.MustCompile(`\{\s*\.\.\.\s*\}`)

// prelude declares what the snippets take from the code around them: a
// context, a Redis client and address, ids, a registry, the caller's own
// functions, and the *testing.T of a test.
const prelude = `package snippets

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgov/lockgov/instrument"
	"github.com/lockgov/lockgov/instrument/etcdlock"
	"github.com/lockgov/lockgov/instrument/redislock"
	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/policy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var (
	ctx                    context.Context
	rdb                    *redis.Client
	etcdClient             *clientv3.Client
	addr, id, orderID      string
	merchantID             string
	amount                 int64
	registry               = prometheus.NewRegistry()
	locker                 instrument.Locker
	t                      *testing.T // docs/SECURITY.md's snippet runs in a test
	pay                    func(context.Context) error
	deductQuota            func(context.Context, string, int64) error
	writeWithFence         func(context.Context, uint64)
)

var (
	_ = errors.Is
	_ = time.Second
	_ = etcdlock.New
	_ = redislock.New
	_ = policy.Default
	_ = testenv.NewRedis
)
`

// TestDocs_GoSnippetsCompile type-checks every ```go block of README.md and
// docs/*.md against the module's current API, each as the body of a
// function after a prelude that declares the variables the snippets take
// from their surroundings. "{ ... }" stands for error handling and becomes
// "{ return }"; a variable a fragment declares and does not use is not an
// error. A renamed option, a changed signature or a removed function fails
// here instead of in a user's editor.
func TestDocs_GoSnippetsCompile(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	snips := goSnippets(t, append([]string{"../../README.md"}, docs...)...)
	if len(snips) < 3 {
		t.Fatalf("found %d go snippets: the extraction is broken", len(snips))
	}
	var src strings.Builder
	src.WriteString(prelude)
	lines := map[int]string{} // line of the generated file -> snippet position
	line := strings.Count(prelude, "\n") + 1
	for i, s := range snips {
		body := elided.ReplaceAllString(s.code, "{ return }")
		fmt.Fprintf(&src, "\nfunc snippet%d() {\n", i)
		line += 2
		for j, l := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
			lines[line] = fmt.Sprintf("%s (line %d of the snippet)", s.where, j+1)
			src.WriteString(l + "\n")
			line++
		}
		src.WriteString("}\n")
		line++
	}
	checkCompiles(t, src.String(), lines)
}

// checkCompiles type-checks src, one file of package snippets, against
// the module's packages, and reports each error at the snippet line it
// came from.
func checkCompiles(t *testing.T, src string, lines map[int]string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snippets.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("the snippets do not parse: %v\n%s", err, numbered(src))
	}
	var paths []string
	for _, imp := range f.Imports {
		paths = append(paths, strings.Trim(imp.Path.Value, `"`))
	}
	// Env: export data compiled with this test binary's -race, as go vet
	// and go test compiled it already (internal/buildflags).
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedTypes, Dir: ".", Env: buildflags.Env(nil)}, paths...)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]*types.Package{}
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			t.Fatalf("%s: %v", p.PkgPath, p.Errors)
		}
		byPath[p.PkgPath] = p.Types
	}
	var errs []string
	conf := types.Config{
		Importer: importerFunc(func(path string) (*types.Package, error) {
			if p := byPath[path]; p != nil {
				return p, nil
			}
			return nil, fmt.Errorf("%s is not imported by the prelude", path)
		}),
		Error: func(err error) {
			te := err.(types.Error)
			if strings.Contains(te.Msg, "declared and not used") {
				return // a fragment may declare what the code after it uses
			}
			pos := fset.Position(te.Pos)
			where, ok := lines[pos.Line]
			if !ok {
				where = fmt.Sprintf("snippets.go:%d", pos.Line)
			}
			errs = append(errs, fmt.Sprintf("%s: %s", where, te.Msg))
		},
	}
	_, _ = conf.Check("snippets", fset, []*ast.File{f}, nil)
	for _, e := range errs {
		t.Error(e)
	}
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

func numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%4d %s\n", i+1, l)
	}
	return b.String()
}
