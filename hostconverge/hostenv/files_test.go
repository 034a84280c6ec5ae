package hostenv

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// TestPendingMarkersAreByPath: two files of one base name in two directories (a
// systemd drop-in named override.conf, say) are each due for their program until it
// applies that file: applying one leaves the other pending.
func TestPendingMarkersAreByPath(t *testing.T) {
	const a, b = "/etc/systemd/system/a.service.d/override.conf", "/etc/systemd/system/b.service.d/override.conf"
	p := NewPass(Env{Root: t.TempDir()})
	for _, name := range []string{a, b} {
		if due, err := p.ChangeFile(name, []byte("[Service]\n"), 0o644); err != nil || !due {
			t.Fatalf("changing %s: due %v, %v", name, due, err)
		}
	}
	if err := p.Applied(a); err != nil {
		t.Fatal(err)
	}
	if pending, err := p.Pending(b); err != nil || !pending {
		t.Errorf("%s applied, %s is pending: %v, %v; want it due until its own program succeeds", a, b, pending, err)
	}
	if pending, err := p.Pending(a); err != nil || pending {
		t.Errorf("%s is pending after it was applied: %v, %v", a, pending, err)
	}
	// A pass killed after its change, the next finds the file as the unit wants it
	// and still due.
	if due, err := p.ChangeFile(b, []byte("[Service]\n"), 0o644); err != nil || !due {
		t.Errorf("changing %s again before it was applied: due %v, %v", b, due, err)
	}
}

// TestPendingMarkerOfAnEarlierBcd: a marker named by the file's base name, as bcd named
// them before, still makes its file due, and applying the file removes it: a pass
// killed before bcd was upgraded does not leave its change unapplied.
func TestPendingMarkerOfAnEarlierBcd(t *testing.T) {
	const name = "/etc/default/grub.d/90-better-compute-iommu.cfg"
	root := t.TempDir()
	old := filepath.Join(root, PendingDir, filepath.Base(name))
	if err := os.MkdirAll(filepath.Dir(old), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p := NewPass(Env{Root: root})
	if due, err := p.ChangeFile(name, nil, 0o644); err != nil || !due {
		t.Fatalf("a file marked by an earlier bcd: due %v, %v; want due", due, err)
	}
	if err := p.Applied(name); err != nil {
		t.Fatal(err)
	}
	if pending, err := p.Pending(name); err != nil || pending {
		t.Errorf("pending %v, %v after it was applied", pending, err)
	}
}

// TestWithPrivateFileLeavesNoSecret: the file holding a secret is gone once its use
// returns, and once it panics (a unit's panic is its own failure, and the pass goes on):
// before, a panic left it. A file out of PrivateDir, which no pass clears of what a killed
// bcd left, is refused and not written.
func TestWithPrivateFileLeavesNoSecret(t *testing.T) {
	const name = PrivateDir + "/secret.conf"
	p := NewPass(Env{Root: t.TempDir()})
	func() {
		defer func() { _ = recover() }()
		_ = p.WithPrivateFile(name, []byte("token"), func() error { panic("the program's runner failed") })
	}()
	if _, err := os.Stat(p.Path(name)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is there after its use panicked: %v", name, err)
	}
	const elsewhere = "/run/better-compute/secret.conf"
	ran := false
	err := p.WithPrivateFile(elsewhere, []byte("token"), func() error { ran = true; return nil })
	if proto.CodeOf(err) != proto.Internal || ran {
		t.Errorf("a file out of %s: %v, use ran %v; want INTERNAL, not run", PrivateDir, err, ran)
	}
	if _, err := os.Stat(p.Path(elsewhere)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s was written: %v", elsewhere, err)
	}
}

// TestRemovePrivateFiles: what an earlier pass left in PrivateDir goes, a directory
// with what it holds included, and is named by its host path; a host whose pass never
// made PrivateDir has nothing to remove; a failure names the host path, not the root.
func TestRemovePrivateFiles(t *testing.T) {
	root := t.TempDir()
	if removed, err := RemovePrivateFiles(root); err != nil || removed != nil {
		t.Fatalf("no %s: removed %q, %v; want nothing", PrivateDir, removed, err)
	}
	dir := filepath.Join(root, PrivateDir)
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kubeadm-join.yaml", ".kubeadm-join.yaml.tmp-812736", "sub/token"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemovePrivateFiles(root)
	want := []string{PrivateDir + "/.kubeadm-join.yaml.tmp-812736", PrivateDir + "/kubeadm-join.yaml", PrivateDir + "/sub"}
	if err != nil || !slices.Equal(removed, want) {
		t.Errorf("removed %q, %v; want %q", removed, err, want)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("%s holds %v after the removal (%v)", PrivateDir, entries, err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = RemovePrivateFiles(root)
	if want := "reading " + PrivateDir + ": "; proto.CodeOf(err) != proto.DriverError || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), root) {
		t.Errorf("a file where %s is: %v, want DRIVER_ERROR %q without the root", PrivateDir, err, want)
	}
}
