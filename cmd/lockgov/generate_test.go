package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockgov/lockgov/internal/generate"
)

func TestRunGenerate_WritesChecksAndRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := filepath.Join(dir, "mixin.yaml")
	if err := os.WriteFile(cfg, []byte("selectors:\n  cluster: prod-eu\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runGenerate(out, "operator", cfg, ""); err != nil {
		t.Fatal(err)
	}
	if err := runGenerate("", "operator", cfg, out); err != nil {
		t.Fatalf("check of fresh output: %v", err)
	}
	// The same output checked against the default config is stale.
	if err := runGenerate("", "operator", "", out); !errors.Is(err, generate.ErrStale) {
		t.Fatalf("check with another config: %v", err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("thresholds:\n  skew_reject: soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		out, format, config, check, want string
	}{
		{out, "plain", bad, "", bad + `:2: thresholds.skew_reject: "soon" is not a duration`},
		{out, "plain", filepath.Join(dir, "none.yaml"), "", "none.yaml: no such file"},
		{notDir, "plain", "", "", notDir + " is a file, not a directory"},
		{out, "helm", "", "", `unknown format "helm"`},
		{"", "plain", "", "", "--out DIR or --check DIR is required"},
		{out, "plain", "", out, "exclude each other"},
		{"", "plain", "", filepath.Join(dir, "missing"), "no such file"},
	} {
		err := runGenerate(tc.out, tc.format, tc.config, tc.check)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("runGenerate(%q, %q, %q, %q) = %v, want %q", tc.out, tc.format, tc.config, tc.check, err, tc.want)
		}
	}
}
