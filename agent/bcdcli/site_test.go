package bcdcli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSiteReportsEveryConfigProblem: `bcd site` with a config holding several problems,
// in the site's part and in the boot server's, prints each with its path.
func TestSiteReportsEveryConfigProblem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "site.json")
	config := `{"version": 2, "boot": {"mode": "authoritative", "serverIP": "10.9.0.1", "ramdiskDir": "/nonexistent",
		"httpPort": 70000}, "cache": {}}`
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Run(context.Background(), []string{"site", "--config", path}, Env{Stdout: &stdout, Stderr: &stderr}); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, stderr.String())
	}
	var paths []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if at, ok := strings.CutPrefix(l, "  at: "); ok {
			paths = append(paths, at)
		}
	}
	want := []string{"version", "boot.interface", "boot.subnet", "boot.range.start", "boot.range.end", "boot.leaseFile",
		"boot.ramdiskDir", "boot.httpPort", "cache.dir"}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Errorf("paths printed (-want +got):\n%s\n%s", diff, stderr.String())
	}
	if n := strings.Count(stderr.String(), "bcd site: error: INVALID_CONFIG: "); n != len(want) {
		t.Errorf("%d problems printed, want %d:\n%s", n, len(want), stderr.String())
	}
}
