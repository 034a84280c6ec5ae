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
	var stdout, stderr bytes.Buffer
	if code := Run(context.Background(), []string{"node", "--config-dir", dir}, Env{Stdout: &stdout, Stderr: &stderr}); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, stderr.String())
	}
	var paths []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if at, ok := strings.CutPrefix(l, "  at: "); ok {
			paths = append(paths, at)
		}
	}
	want := []string{"version", "server", "role", "joinEncryptionPin", "metricsListen"}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Errorf("paths printed (-want +got):\n%s\n%s", diff, stderr.String())
	}
	if n := strings.Count(stderr.String(), "bcd node: error: INVALID_CONFIG: "+file+": "); n != len(want) {
		t.Errorf("%d problems printed naming %s, want %d:\n%s", n, file, len(want), stderr.String())
	}
}
