package mount

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Mounted is a partition of the written disk mounted on a temporary directory.
type Mounted struct {
	// Dir is where the file system is mounted.
	Dir  string
	loop *Loop
}

// flags are the mount's: the file system is the written image's, and the ramdisk only
// reads and writes files in it (the first-boot files, kexec's kernel and initrds, which
// kexec_file_load reads as data), so a device node it holds opens nothing (nodev), and its
// set-user-ID files and programs run nothing from it (nosuid, noexec).
const flags = unix.MS_NODEV | unix.MS_NOSUID | unix.MS_NOEXEC

// Partition mounts [off, off+size) of disk read-write, without devices, set-user-ID or
// programs, on a new temporary directory.
func Partition(disk *os.File, off, size int64) (*Mounted, error) {
	loop, err := AttachLoop(disk, off, size)
	if err != nil {
		return nil, err
	}
	fstype, err := FSType(io.NewSectionReader(loop.File(), 0, size))
	if err != nil {
		loop.Close()
		return nil, fmt.Errorf("partition at %d: %w", off, err)
	}
	dir, err := os.MkdirTemp("", "bc-mnt-")
	if err != nil {
		loop.Close()
		return nil, err
	}
	if err := unix.Mount(loop.Path(), dir, fstype, flags, ""); err != nil {
		os.Remove(dir)
		loop.Close()
		return nil, fmt.Errorf("mount %s (%s) on %s: %w", loop.Path(), fstype, dir, err)
	}
	return &Mounted{Dir: dir, loop: loop}, nil
}

// Unmount syncs the file system, unmounts it and releases the loop device. A sync that
// fails (the disk could not take what was written into the file system) fails Unmount
// too, after it unmounts: the unmount itself reports no write it lost.
func (m *Mounted) Unmount() error {
	serr := m.sync()
	err := unix.Unmount(m.Dir, 0)
	if cerr := m.loop.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Remove(m.Dir)
	}
	if serr != nil {
		return serr
	}
	return err
}

// sync writes what the mounted file system holds in memory to its disk (syncfs(2)),
// reporting a write the disk failed since the mount.
func (m *Mounted) sync() error {
	f, err := os.Open(m.Dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("sync the file system on %s: %w", m.loop.Path(), err)
	}
	return nil
}
