package mount

import (
	"errors"
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

// TestPartitionIgnoresTheImagesDevicesAndSetuid: the written image's file system is the
// tenant's, and the ramdisk mounts it only to read and write files. A device node it
// holds (here /dev/zero's numbers; a machine's other disk, or /dev/mem, as easily) does
// not open through the mount, and its set-user-ID files and executables do not run from
// it. Before, the partition was mounted with neither nodev, nosuid nor noexec, and the
// image's node opened the device for whoever in the ramdisk followed a path into it.
func TestPartitionIgnoresTheImagesDevicesAndSetuid(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a loop device, a device node and a mount need root")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("mkfs.ext4 is not installed")
	}
	tree := t.TempDir()
	if err := unix.Mknod(filepath.Join(tree, "zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "setuid"), []byte("#!/bin/sh\n"), 0o4755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "disk")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-d", tree, path, "16m").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	disk, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	m, err := Partition(disk, 0, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmount()
	if f, err := os.Open(filepath.Join(m.Dir, "zero")); err == nil {
		f.Close()
		t.Error("the image's device node opened through the mount")
	} else if !errors.Is(err, os.ErrPermission) {
		t.Errorf("opening the image's device node: %v, want a permission error", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(m.Dir, &st); err != nil {
		t.Fatal(err)
	}
	for flag, name := range map[int64]string{unix.ST_NODEV: "nodev", unix.ST_NOSUID: "nosuid", unix.ST_NOEXEC: "noexec"} {
		if st.Flags&flag == 0 {
			t.Errorf("the partition is mounted without %s (flags %#x)", name, st.Flags)
		}
	}
	// Files are still written there, as the first-boot files are.
	if err := os.WriteFile(filepath.Join(m.Dir, "user-data"), []byte("#cloud-config\n"), 0o600); err != nil {
		t.Fatalf("writing into the mounted partition: %v", err)
	}
}
