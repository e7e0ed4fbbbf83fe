package buildflags

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestArgs_MatchHowThisBinaryWasBuilt builds a program that prints what
// Args says, with and without -race, and runs it: a Race that read the
// wrong setting, or none, would answer the same for both.
func TestArgs_MatchHowThisBinaryWasBuilt(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed: %v", err)
	}
	dir := t.TempDir()
	for _, race := range []bool{false, true} {
		bin := filepath.Join(dir, "probe")
		args := []string{"build", "-o", bin}
		if race {
			args = append(args, "-race")
		}
		cmd := exec.Command(goBin, append(args, "./testdata/probe")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
		out, err := exec.Command(bin).Output()
		if err != nil {
			t.Fatal(err)
		}
		want := "[]"
		if race {
			want = "[-race]"
		}
		if string(out) != want {
			t.Errorf("built with race=%v: Args() = %s, want %s", race, out, want)
		}
		_ = os.Remove(bin)
	}
	if got, want := Args(), []string(nil); Race() != slices.Contains(got, "-race") || (!Race() && !slices.Equal(got, want)) {
		t.Errorf("Args() = %v with Race() = %v", got, Race())
	}
}

// TestEnv_AddsRaceToGOFLAGSOnlyUnderRace keeps the caller's GOFLAGS and
// adds -race after them when this binary has it.
func TestEnv_AddsRaceToGOFLAGSOnlyUnderRace(t *testing.T) {
	got := Env([]string{"A=1", "GOFLAGS=-mod=mod"})
	want := []string{"A=1", "GOFLAGS=-mod=mod"}
	if Race() {
		want = append(want, "GOFLAGS=-mod=mod -race")
	}
	if !slices.Equal(got, want) {
		t.Errorf("Env = %q, want %q", got, want)
	}
}
