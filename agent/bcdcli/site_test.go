package bcdcli

import (
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
	stderr, paths := runFailing(t, "site", "--config", path)
	want := []string{"version", "boot.interface", "boot.subnet", "boot.range.start", "boot.range.end", "boot.leaseFile",
		"boot.ramdiskDir", "boot.httpPort", "cache.dir"}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Errorf("paths printed (-want +got):\n%s\n%s", diff, stderr)
	}
	if n := strings.Count(stderr, "bcd site: error: INVALID_CONFIG: "); n != len(want) {
		t.Errorf("%d problems printed, want %d:\n%s", n, len(want), stderr)
	}
}
