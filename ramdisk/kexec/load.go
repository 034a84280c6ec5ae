package kexec

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Load loads b's kernel with kexec_file_load, so that Reboot starts it. Several initrds
// are concatenated into one in memory, as a boot loader would.
func Load(b Boot) error {
	kernel, err := os.Open(b.Kernel)
	if err != nil {
		return err
	}
	defer kernel.Close()
	initrd, flags := -1, unix.KEXEC_FILE_NO_INITRAMFS
	if len(b.Initrds) > 0 {
		f, err := joinInitrds(b.Initrds)
		if err != nil {
			return err
		}
		defer f.Close()
		initrd, flags = int(f.Fd()), 0
	}
	if err := unix.KexecFileLoad(int(kernel.Fd()), initrd, b.Cmdline, flags); err != nil {
		return fmt.Errorf("kexec_file_load %s: %w", b.Kernel, err)
	}
	return nil
}

// joinInitrds returns the one initrd itself, or the concatenation of several in a
// memory file.
func joinInitrds(paths []string) (*os.File, error) {
	if len(paths) == 1 {
		return os.Open(paths[0])
	}
	fd, err := unix.MemfdCreate("initrd", 0)
	if err != nil {
		return nil, err
	}
	out := os.NewFile(uintptr(fd), "initrd")
	for _, p := range paths {
		in, err := os.Open(p)
		if err != nil {
			out.Close()
			return nil, err
		}
		_, err = io.Copy(out, in)
		in.Close()
		if err != nil {
			out.Close()
			return nil, err
		}
	}
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		out.Close()
		return nil, err
	}
	return out, nil
}

// Reboot syncs the file systems and starts the loaded kernel. It returns only on
// failure. Unmount the written OS before calling it.
func Reboot() error {
	unix.Sync()
	return unix.Reboot(unix.LINUX_REBOOT_CMD_KEXEC)
}
