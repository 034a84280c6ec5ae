// Package mount mounts a partition of the written disk so that files can be put into
// the OS on it: a loop device over the partition's byte range (the same for a block
// device and for a disk image, and independent of the kernel rescanning the table), its
// file system told from its superblock, and the mount syscall.
package mount

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Loop is a loop device attached to a range of a file or device.
type Loop struct {
	f    *os.File
	path string
}

// AttachLoop attaches a free loop device to [off, off+size) of backing. The device
// goes away by itself once closed and unmounted (LO_FLAGS_AUTOCLEAR).
func AttachLoop(backing *os.File, off, size int64) (*Loop, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	for range 8 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		path := fmt.Sprintf("/dev/loop%d", n)
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd()), Info: unix.LoopInfo64{
			Offset: uint64(off), Sizelimit: uint64(size), Flags: unix.LO_FLAGS_AUTOCLEAR}}
		err = unix.IoctlLoopConfigure(int(f.Fd()), &cfg)
		if err == nil {
			return &Loop{f: f, path: path}, nil
		}
		f.Close()
		// Another process took the device between the two calls: ask again.
		if err != unix.EBUSY {
			return nil, fmt.Errorf("LOOP_CONFIGURE %s: %w", path, err)
		}
	}
	return nil, fmt.Errorf("no free loop device")
}

// Path is the device's path, /dev/loopN.
func (l *Loop) Path() string { return l.path }

// File is the open device.
func (l *Loop) File() *os.File { return l.f }

// Close releases the device; it detaches once nothing has it mounted.
func (l *Loop) Close() error { return l.f.Close() }
