package main

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestGeneratedDocsAreCurrent fails when docs/commands.md or the README's command table
// is not what the command trees generate: run `make docs` and commit the result.
func TestGeneratedDocsAreCurrent(t *testing.T) {
	checked, err := os.ReadFile("../../docs/commands.md")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(reference()), string(checked)); diff != "" {
		t.Errorf("docs/commands.md is stale: run `make docs` (-generated +checked in):\n%s", diff)
	}
	current, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := readme(current)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(current)); diff != "" {
		t.Errorf("README.md's command table is stale: run `make docs` (-generated +checked in):\n%s", diff)
	}
}
