package mount

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUnmountReportsALostWrite: files written into a mounted partition that the disk
// under it cannot take (its backing file on a full tmpfs: an I/O error as a failing disk
// gives) make Unmount fail. The first-boot files go in last, and a deploy that reported
// success over them would boot an OS without its user data or join token.
func TestUnmountReportsALostWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a loop device and a mount need root")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("mkfs.ext4 is not installed")
	}
	small := t.TempDir()
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=6m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(small, unix.MNT_DETACH) })
	path := filepath.Join(small, "disk")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", path, "64m").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	disk, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	m, err := Partition(disk, 0, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.Dir, "user-data"), make([]byte, 16<<20), 0o600); err != nil {
		m.Unmount()
		t.Fatalf("the write itself failed (the page cache takes it): %v", err)
	}
	if err := m.Unmount(); err == nil {
		t.Fatal("Unmount succeeded over 16 MiB the disk could not take")
	} else {
		t.Logf("Unmount: %v", err)
	}
}
