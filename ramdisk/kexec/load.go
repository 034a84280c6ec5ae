package kexec

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// MaxInitrdBytes bounds the initrds Load hands the kernel, together: real ones are some
// tens of MiB, one that carries a GPU driver's modules and firmware a few hundred, and
// the kernel reads at most 2 GiB of one. They are the written image's, named by its boot
// entry, and several are concatenated in the ramdisk's memory: a sparse file of any size,
// or one file named thousands of times, would otherwise fill it.
const MaxInitrdBytes = 1 << 30

// ErrInitrdsTooLarge means the initrds come to more than MaxInitrdBytes.
var ErrInitrdsTooLarge = errors.New("the initrds are larger than the ramdisk loads")

// Load loads b's kernel with kexec_file_load, so that Reboot starts it. Several initrds
// are concatenated into one in memory, as a boot loader would, of at most
// MaxInitrdBytes in all.
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
// memory file; either of at most MaxInitrdBytes, their sizes checked before anything is
// copied.
func joinInitrds(paths []string) (*os.File, error) {
	if err := checkInitrdSizes(paths); err != nil {
		return nil, err
	}
	if len(paths) == 1 {
		return os.Open(paths[0])
	}
	fd, err := unix.MemfdCreate("initrd", 0)
	if err != nil {
		return nil, err
	}
	out := os.NewFile(uintptr(fd), "initrd")
	left := int64(MaxInitrdBytes)
	for _, p := range paths {
		in, err := os.Open(p)
		if err != nil {
			out.Close()
			return nil, err
		}
		// A file that grew since its size was checked is cut at the bound, and refused.
		n, err := io.Copy(out, io.LimitReader(in, left+1))
		in.Close()
		if left -= n; err == nil && left < 0 {
			err = fmt.Errorf("%w: more than %d bytes", ErrInitrdsTooLarge, int64(MaxInitrdBytes))
		}
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

// checkInitrdSizes refuses initrds that come to more than MaxInitrdBytes.
func checkInitrdSizes(paths []string) error {
	var total int64
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if total += st.Size(); total > MaxInitrdBytes {
			return fmt.Errorf("%w: %d initrds of more than %d bytes", ErrInitrdsTooLarge, len(paths), int64(MaxInitrdBytes))
		}
	}
	return nil
}

// Reboot syncs the file systems and starts the loaded kernel. It returns only on
// failure. Unmount the written OS before calling it.
func Reboot() error {
	unix.Sync()
	return unix.Reboot(unix.LINUX_REBOOT_CMD_KEXEC)
}
