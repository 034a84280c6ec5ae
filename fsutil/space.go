package fsutil

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Space is what statfs(2) says of a filesystem: its size and the bytes an unprivileged
// writer may still use (f_bavail, which leaves out the blocks kept for root).
type Space struct {
	Total int64
	Avail int64
}

// SpaceOf reads the Space of the filesystem that holds path.
func SpaceOf(path string) (Space, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return Space{}, fmt.Errorf("read the free space of the filesystem of %s: %w", path, err)
	}
	return Space{Total: int64(st.Blocks) * int64(st.Bsize), Avail: int64(st.Bavail) * int64(st.Bsize)}, nil
}
