package hostenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/testkit/crashpoint"
)

// The host paths TestHostFilesChild writes and removes.
const (
	dropIn = "/etc/systemd/system/gpu.service.d/override.conf"
	gone   = "/etc/modprobe.d/blacklist-nouveau.conf"
)

// TestHostFilesChild is the child of TestHostFileChangesAreSynced: under the root its
// parent names, it writes a drop-in into a directory that does not exist yet and removes
// a file, as a unit's pass does before the host is reported converged.
func TestHostFilesChild(t *testing.T) {
	p := NewPass(Env{Root: crashpoint.Child(t)})
	if _, err := p.EnsureFile(dropIn, []byte("[Service]\nLimitMEMLOCK=infinity\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if removed, err := p.RemoveFile(gone); err != nil || !removed {
		t.Fatalf("removing %s: %v, %v", gone, removed, err)
	}
}

// TestHostFileChangesAreSynced: what a pass reports done survives a power loss: the
// directory EnsureFile made is fsynced in its parent (the file's own directory is, by
// the atomic write, but a directory's name is its parent's), and the directory of a file
// RemoveFile removed is fsynced, so the host does not boot with the file back.
func TestHostFileChangesAreSynced(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/systemd/system"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/modprobe.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, gone), []byte("blacklist nouveau\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	calls := crashpoint.Trace(t, "TestHostFilesChild", root)
	for _, path := range []string{dropIn, filepath.Dir(dropIn), gone} {
		crashpoint.SyncedDir(t, calls, filepath.Join(root, path))
	}
}
