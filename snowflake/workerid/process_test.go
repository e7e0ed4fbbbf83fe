package workerid_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgov/lockgov/internal/testenv"
	"github.com/lockgov/lockgov/snowflake"
	"github.com/lockgov/lockgov/snowflake/workerid"
)

// The parent re-executes this test binary with these variables set; the child claims a
// WorkerID, issues IDs for childHold and writes what it got to WID_OUT.
const (
	childEnv  = "LOCKGOV_WORKERID_CHILD"
	childHold = 1500 * time.Millisecond
)

// TestChildProcess is the child's body; it does nothing in a normal run.
func TestChildProcess(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("runs only as a child of TestTwoProcesses_ClaimSamePreferredSlot")
	}
	out, err := os.Create(os.Getenv("WID_OUT"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	w := bufio.NewWriter(out)
	defer w.Flush()
	opts := []workerid.Option{workerid.WithTTL(testTTL), workerid.WithServiceRange("auth", 0, 9), workerid.WithIdentity("auth-3", "")}
	if os.Getenv("WID_NEXTFREE") == "1" {
		opts = append(opts, workerid.WithNextFree())
	}
	var reg *workerid.Registry
	switch os.Getenv("WID_BACKEND") {
	case "redis":
		c := redisClient(os.Getenv("WID_ADDR"))
		defer c.Close()
		reg, err = workerid.NewRedis(c, opts...)
	case "etcd":
		c, cerr := etcdClient(os.Getenv("WID_ADDR"))
		if cerr != nil {
			t.Fatal(cerr)
		}
		defer c.Close()
		reg, err = workerid.NewEtcd(c, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lease, err := reg.Claim(ctx, "auth")
	if err != nil {
		fmt.Fprintf(w, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	defer lease.Release(ctx)
	fmt.Fprintf(w, "slot %d\n", lease.WorkerID())
	if err := w.Flush(); err != nil { // the parent reads the slot line while we hold it
		t.Fatal(err)
	}
	// Hold the slot (after issuing) until the parent has seen the other child's claim:
	// it closes our stdin then. A timing margin would not do: the two may start far apart.
	defer func() { _, _ = io.Copy(io.Discard, os.Stdin) }()
	g, err := snowflake.New(lease.WorkerID(), snowflake.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < childHold; time.Sleep(time.Millisecond) {
		ids, err := g.NextN(ctx, 100)
		if err != nil {
			fmt.Fprintf(w, "error %s\n", err)
			return
		}
		for _, id := range ids {
			fmt.Fprintln(w, id)
		}
	}
}

type childResult struct {
	slot int64 // -1: no slot
	err  string
	ids  []int64
}

func runChildren(t *testing.T, s store, nextFree bool) []childResult {
	dir := t.TempDir()
	res := make([]childResult, 2)
	started := make([]func() bool, 2)
	var stdins []io.Closer
	var wg sync.WaitGroup
	defer func() { // also when t fails: no child may hold its slot, nor outlive the test
		for _, c := range stdins {
			_ = c.Close()
		}
		wg.Wait()
	}()
	for i := range res {
		out := filepath.Join(dir, fmt.Sprintf("child%d", i))
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.count=1")
		nf := "0"
		if nextFree {
			nf = "1"
		}
		cmd.Env = append(os.Environ(), childEnv+"=1", "WID_BACKEND="+s.name, "WID_ADDR="+s.addr, "WID_NEXTFREE="+nf, "WID_OUT="+out)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdins = append(stdins, stdin)
		exited := make(chan struct{})
		started[i] = func() bool {
			select {
			case <-exited:
				return true
			default:
			}
			b, _ := os.ReadFile(out)
			return bytes.ContainsRune(b, '\n') // its first line: the slot it claimed, or the error
		}
		wg.Go(func() {
			defer close(exited)
			b, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("child %d: %v\n%s", i, err, b)
				return
			}
			res[i] = readResult(t, out)
		})
	}
	testenv.WaitFor(t, time.Minute, "both children to claim", func() bool { return started[0]() && started[1]() })
	for _, c := range stdins { // a child holding its slot releases it and exits on EOF
		_ = c.Close()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return res
}

func readResult(t *testing.T, path string) childResult {
	f, err := os.Open(path)
	if err != nil {
		t.Error(err)
		return childResult{}
	}
	defer f.Close()
	r := childResult{slot: -1}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "slot "):
			r.slot, _ = strconv.ParseInt(line[5:], 10, 64)
		case strings.HasPrefix(line, "error "):
			r.err = line[6:]
		default:
			id, err := strconv.ParseInt(line, 10, 64)
			if err != nil {
				t.Errorf("%s: %q", path, line)
			}
			r.ids = append(r.ids, id)
		}
	}
	return r
}

// TestTwoProcesses_ClaimSamePreferredSlot runs two real processes on the same StatefulSet
// ordinal against real Redis and real etcd: exactly one gets the slot; the other errors,
// or takes another slot when it opted in; no ID is issued by both.
func TestTwoProcesses_ClaimSamePreferredSlot(t *testing.T) {
	t.Parallel()
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			// One store's two cases run one after the other: both claim its slot 3.
			for _, nextFree := range []bool{false, true} {
				t.Run(fmt.Sprintf("nextFree=%v", nextFree), func(t *testing.T) {
					res := runChildren(t, s, nextFree)
					winners := 0
					seen := map[int64]int{}
					for i, r := range res {
						if r.slot == 3 {
							winners++
						}
						switch {
						case r.slot == -1 && nextFree:
							t.Fatalf("child %d got no slot with WithNextFree: %s", i, r.err)
						case r.slot == -1 && !strings.Contains(r.err, "worker id 3 is held by"):
							t.Fatalf("child %d: error %q does not name the collision", i, r.err)
						case r.slot != -1 && r.err != "":
							t.Fatalf("child %d (slot %d) failed while issuing: %s", i, r.slot, r.err)
						case r.slot != -1 && len(r.ids) == 0:
							t.Fatalf("child %d (slot %d) issued nothing", i, r.slot)
						}
						for _, id := range r.ids {
							if j, dup := seen[id]; dup && j != i {
								t.Fatalf("id %d issued by both processes", id)
							}
							seen[id] = i
						}
					}
					if winners != 1 {
						t.Fatalf("%d processes got slot 3, want exactly 1: %+v", winners, []any{res[0].slot, res[0].err, res[1].slot, res[1].err})
					}
					if nextFree && res[0].slot == res[1].slot {
						t.Fatalf("both took slot %d", res[0].slot)
					}
					t.Logf("slots %d/%d, %d IDs, loser: %q", res[0].slot, res[1].slot, len(seen), res[0].err+res[1].err)
				})
			}
		})
	}
}
