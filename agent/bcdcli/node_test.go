package bcdcli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto/bcdargv"
	"github.com/google/go-cmp/cmp"
)

// TestNodeReportsEveryConfigProblem: `bcd node` with a config.toml holding several
// problems prints each as INVALID_CONFIG, naming the file, with its key, as `bcd site`
// does its own config's.
func TestNodeReportsEveryConfigProblem(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, bcdargv.ConfigFile)
	config := "version = 2\nserver = 'http://registry.example'\nnodeId = 'node-1'\nrole = 'boss'\n" +
		"servingCaPin = 'sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='\n" +
		"joinSigningPin = 'sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='\n" +
		"joinEncryptionPin = 'md5/x'\nmetricsListen = '127.0.0.1'\n"
	if err := os.WriteFile(file, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr, paths := runFailing(t, "node", "--config-dir", dir)
	want := []string{"version", "server", "role", "joinEncryptionPin", "metricsListen"}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Errorf("paths printed (-want +got):\n%s\n%s", diff, stderr)
	}
	if n := strings.Count(stderr, "bcd node: error: INVALID_CONFIG: "+file+": "); n != len(want) {
		t.Errorf("%d problems printed naming %s, want %d:\n%s", n, file, len(want), stderr)
	}
}

// runFailing runs bcd with args, which must exit 1, and returns what it printed to
// stderr and the paths of the errors it printed, in order.
func runFailing(t *testing.T, args ...string) (stderr string, paths []string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), args, Env{Stdout: &out, Stderr: &errOut}); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, errOut.String())
	}
	for _, l := range strings.Split(errOut.String(), "\n") {
		if at, ok := strings.CutPrefix(l, "  at: "); ok {
			paths = append(paths, at)
		}
	}
	return errOut.String(), paths
}
