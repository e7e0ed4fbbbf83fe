package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLastDump_ReadsTheNewestNumberedDump(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "callgrind.out")
	for name, summary := range map[string]string{"callgrind.out.2": "200", "callgrind.out.10": "1000", "callgrind.out.9": "900"} {
		body := "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: " + summary + "\ntotals: 1\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The final dump callgrind writes at exit has no number: not a part.
	if err := os.WriteFile(out, []byte("summary: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := lastDump(out)
	if err != nil {
		t.Fatal(err)
	}
	if got != 1000 {
		t.Errorf("lastDump = %d, want 1000 (callgrind.out.10, not .9 by name order)", got)
	}
}

func TestLastDump_NamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "callgrind.out")
	if _, err := lastDump(out); err == nil || !strings.Contains(err.Error(), "no callgrind dump") {
		t.Errorf("no dumps: err = %v", err)
	}
	if err := os.WriteFile(out+".1", []byte("events: Ir\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := lastDump(out); err == nil || !strings.Contains(err.Error(), "no summary line") {
		t.Errorf("dump without a summary: err = %v", err)
	}
}
