package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/better-compute/better-compute/cmdline"
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

// TestManPages writes the man pages and checks there is one for every command of both
// binaries, naming its flags.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if err := run("../..", dir); err != nil {
		t.Fatal(err)
	}
	for _, root := range roots() {
		for _, c := range cmdline.Commands(root) {
			name := strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
			page, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Errorf("no man page for %s: %v", c.CommandPath(), err)
				continue
			}
			c.LocalFlags().VisitAll(func(f *pflag.Flag) {
				if !bytes.Contains(page, []byte("--"+f.Name)) {
					t.Errorf("%s does not name --%s", name, f.Name)
				}
			})
		}
	}
}

// TestFlagValueNamesAreOneWord: the placeholder a flag's usage shows for its value is one
// word (FILE, string, DIGEST). pflag takes the first back-quoted words of a flag's help as
// that placeholder, so a help quoting a command named it: the reference showed
// `--mac nodes get`, `--step workflows get`, `--public-key openssl pkey -pubout` and
// `--config-dir bcd join`.
func TestFlagValueNamesAreOneWord(t *testing.T) {
	for _, root := range roots() {
		for _, c := range cmdline.Commands(root) {
			c.LocalFlags().VisitAll(func(f *pflag.Flag) {
				if name, _ := pflag.UnquoteUsage(f); strings.ContainsAny(name, " \t") {
					t.Errorf("%s --%s shows its value as %q: quote one word of its help for it, or none", c.CommandPath(), f.Name, name)
				}
			})
		}
	}
}
