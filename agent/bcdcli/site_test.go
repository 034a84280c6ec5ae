package bcdcli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto/bcdargv"
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

// TestSiteReportsEveryProblemOfConfigTOML: `bcd site` whose configDir's config.toml holds
// two wrong keys prints each as INVALID_CONFIG naming that file, at its key there, as
// `bcd node` does, not one error at configDir.
func TestSiteReportsEveryProblemOfConfigTOML(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, bcdargv.ConfigFile)
	pin := "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
	config := "version = 1\nserver = 'https://registry.example:7443'\nagentEndpoint = 'registry.example:7444'\nnodeId = 'rack-a'\n" +
		"role = 'boss'\nservingCaPin = '" + pin + "'\njoinSigningPin = '" + pin + "'\njoinEncryptionPin = '" + pin + "'\n" +
		"metricsListen = '127.0.0.1'\n"
	if err := os.WriteFile(file, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	site := filepath.Join(t.TempDir(), "site.json")
	files := t.TempDir()
	doc := `{"version": 1, "configDir": "` + dir + `", "boot": {"interface": "bc0", "mode": "proxy", "serverIP": "10.9.0.1",
		"ipxeDir": "` + files + `", "ramdiskDir": "` + files + `"}, "cache": {"dir": "` + t.TempDir() + `"}, "stateDir": "` + t.TempDir() + `"}`
	if err := os.WriteFile(site, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr, paths := runFailing(t, "site", "--config", site)
	want := []string{"role", "metricsListen"}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Errorf("paths printed (-want +got):\n%s\n%s", diff, stderr)
	}
	if n := strings.Count(stderr, "bcd site: error: INVALID_CONFIG: "+file+": "); n != len(want) {
		t.Errorf("%d problems printed naming %s, want %d:\n%s", n, file, len(want), stderr)
	}
}

// TestSiteNamesTheWholeConfigFile: a site config that cannot be read, or is not a JSON
// object, is one INVALID_CONFIG at ".", the file as a whole, as config.toml's would be.
func TestSiteNamesTheWholeConfigFile(t *testing.T) {
	dir := t.TempDir()
	notObject := filepath.Join(dir, "site.json")
	if err := os.WriteFile(notObject, []byte("[1]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{notObject, filepath.Join(dir, "missing.json")} {
		stderr, paths := runFailing(t, "site", "--config", path)
		if diff := cmp.Diff([]string{"."}, paths); diff != "" || !strings.HasPrefix(stderr, "bcd site: error: INVALID_CONFIG: ") {
			t.Errorf("%s: paths printed (-want +got):\n%s\n%s", path, diff, stderr)
		}
	}
}
