package registry

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit/crashpoint"
)

// TestFirstStartChild is the child of TestFirstStartDirectoriesAreSynced: it starts a
// registry on the data directory its parent names, which does not exist yet, as
// `serve`'s first start does, and stops it.
func TestFirstStartChild(t *testing.T) {
	newTestRegistry(t, Config{DataDir: crashpoint.Child(t)})
}

// TestFirstStartDirectoriesAreSynced: what a first start makes survives a power loss
// once it is listening: the data directory and its pki/ are fsynced in their parents,
// as are the store file and the keys in them. Each file's own directory is fsynced by
// its write, but a directory's name is its parent's: a power loss that lost the data
// directory's would lose the store, the keys and admin.conf with it, after the registry
// handed out its pins and acknowledged writes.
func TestFirstStartDirectoriesAreSynced(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "srv", "data")
	calls := crashpoint.Trace(t, "TestFirstStartChild", dir)
	for _, path := range []string{filepath.Dir(dir), dir, filepath.Join(dir, pki.Dir), filepath.Join(dir, store.FileName),
		filepath.Join(dir, AdminConfig), filepath.Join(dir, pki.PinsFile), filepath.Join(dir, pki.Dir, "serving-ca.key")} {
		crashpoint.SyncedDir(t, calls, path)
	}
}

// TestKEKStartChild is the child of TestKilledKEKWriteLeavesNothingBehind: it starts a
// registry with its data directory in the directory its parent names and its KEK file
// in keys/ there, outside the data directory, as a first start with --kek-file.
func TestKEKStartChild(t *testing.T) {
	dir := crashpoint.Child(t)
	newTestRegistry(t, Config{DataDir: filepath.Join(dir, "data"), KEKFile: filepath.Join(dir, "keys", "kek")})
}

// TestKilledKEKWriteLeavesNothingBehind: a first start killed while it writes the KEK
// file, between making its temporary file and linking it in place, leaves the temporary
// file (a whole KEK) in the KEK file's directory, outside the data directory where the
// start removes leftovers. The next start makes the KEK file and removes the leftover,
// which no one would otherwise: a copy of a key that opens nothing, in a directory an
// operator backs up and copies to the other replicas.
func TestKilledKEKWriteLeavesNothingBehind(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.Mkdir(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	if !crashpoint.KillAt(t, "TestKEKStartChild", dir, "linkat", 1) {
		t.Fatal("the start made no link: the KEK file is not written through a temporary file")
	}
	left, err := filepath.Glob(filepath.Join(keys, ".kek.tmp-*"))
	if err != nil || len(left) != 1 {
		t.Fatalf("the killed start left %q, %v; want its temporary KEK file", left, err)
	}
	r := newTestRegistry(t, Config{DataDir: filepath.Join(dir, "data"), KEKFile: filepath.Join(keys, "kek")})
	if !r.Info().KEKMade {
		t.Errorf("the next start did not make the KEK file")
	}
	entries, err := os.ReadDir(keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "kek" {
			t.Errorf("the KEK file's directory still holds %s after the next start", e.Name())
		}
	}
}
