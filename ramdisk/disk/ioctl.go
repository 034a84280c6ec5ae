package disk

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctlPtr issues an ioctl whose argument is a pointer to v.
func ioctlPtr[T any](f *os.File, req uint, v *T) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(req), uintptr(unsafe.Pointer(v)))
	if errno != 0 {
		return errno
	}
	return nil
}
