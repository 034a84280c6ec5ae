package testkit

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// SmallFS mounts a tmpfs of size bytes in a temporary directory for the test and
// unmounts it in cleanup: a real filesystem small enough to fill (a cache's disk bound,
// the capacity a site reports by it). It needs root, and skips the test without it.
func SmallFS(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root: run the test as root (CI does)")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Fatalf("mount a tmpfs of %d bytes on %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}
