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

// The host path TestHostFileModeChild corrects the mode of.
const moded = "/etc/modules-load.d/gpu.conf"

// TestHostFileModeChild is the child of TestHostFileModeIsSynced: under the root its
// parent names, it ensures a file that holds its content already with another mode, as
// a unit's pass does before the host is reported converged.
func TestHostFileModeChild(t *testing.T) {
	p := NewPass(Env{Root: crashpoint.Child(t)})
	if changed, err := p.EnsureFile(moded, []byte("nvidia\n"), 0o644); err != nil || !changed {
		t.Fatalf("ensuring %s: %v, %v", moded, changed, err)
	}
}

// TestHostFileModeIsSynced: a mode correction the pass reports done survives a power
// loss: the file is fsynced after its mode changes, as a rewrite is before its rename.
// A host that lost it would boot with the file's old mode (a key others can read, a
// script that does not run) after the pass said it was corrected.
func TestHostFileModeIsSynced(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, moded)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("nvidia\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	crashpoint.SyncedMode(t, crashpoint.Trace(t, "TestHostFileModeChild", root), path)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("after the pass the file's mode is %v, want 0644", st.Mode().Perm())
	}
}
