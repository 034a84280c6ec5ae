// Package disk is the ramdisk's side of the disk it writes: a target (a block device, or
// a plain file in tests), whether it is known to read back zeros, a buffered writer that
// skips zero blocks where it may and writes a block device's aligned blocks around the
// page cache (O_DIRECT), and the wipe that leaves a failed disk unbootable.
package disk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MiB is a mebibyte.
const MiB = 1 << 20

// Target is the disk an image is written to: a block device, or a regular file.
type Target struct {
	f     *os.File
	block bool
	// direct is a block device opened again with O_DIRECT, for the writes whose
	// offset, length and memory are aligned to align: they bypass the page cache and
	// its writeback, which would copy every byte once more and queue them all behind
	// the final sync. nil for a file (tmpfs refuses O_DIRECT or ignores it) and for a
	// device that refuses it; then every write goes through f.
	direct *os.File
	align  int
	// directBytes counts the bytes written through direct.
	directBytes int64
	// size is a block device's capacity; files grow as they are written.
	size int64
	// sys is the sysfs directory of a block device's queue settings.
	sys string
}

// Open opens path for writing: an existing block device, or an existing regular file.
// Nothing is created, so that a mistyped device path fails rather than filling a file
// in the ramdisk's memory.
func Open(path string) (*Target, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	t := &Target{f: f}
	switch {
	case st.Mode().IsRegular():
	case st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0:
		t.block = true
		if t.size, err = deviceSize(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: size: %w", path, err)
		}
		var s unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &s); err != nil {
			f.Close()
			return nil, err
		}
		t.sys = queueDir("/sys", unix.Major(s.Rdev), unix.Minor(s.Rdev))
		t.openDirect(path)
	default:
		f.Close()
		return nil, fmt.Errorf("%s is neither a block device nor a regular file", path)
	}
	return t, nil
}

// openDirect opens the block device at path a second time with O_DIRECT, aligned to
// its logical sector and at least to a page (the writer's zero granule, and more than
// any device's memory alignment). A device that refuses is written through the page
// cache.
func (t *Target) openDirect(path string) {
	sector, err := t.SectorSize()
	if err != nil || sector <= 0 || sector&(sector-1) != 0 {
		return
	}
	if f, err := os.OpenFile(path, os.O_WRONLY|unix.O_DIRECT, 0); err == nil {
		t.direct, t.align = f, max(int(sector), granule)
	}
}

// Capacity is a block device's size in bytes, or -1 for a file, which grows.
func (t *Target) Capacity() int64 {
	if !t.block {
		return -1
	}
	return t.size
}

// File is the open target, for readers such as the partition scan.
func (t *Target) File() *os.File { return t.f }

// Close closes the target.
func (t *Target) Close() error {
	if t.direct != nil {
		t.direct.Close()
	}
	return t.f.Close()
}

// SectorSize is the logical sector size partition tables are laid out in: the
// device's own, or 512 for a file.
func (t *Target) SectorSize() (int64, error) {
	if !t.block {
		return 512, nil
	}
	var size int32
	if err := ioctlPtr(t.f, unix.BLKSSZGET, &size); err != nil {
		return 0, err
	}
	return int64(size), nil
}

func deviceSize(f *os.File) (int64, error) {
	var size uint64
	if err := ioctlPtr(f, unix.BLKGETSIZE64, &size); err != nil {
		return 0, err
	}
	return int64(size), nil
}

// queueDir is the sysfs queue directory of a block device: its own for a whole disk,
// its parent's for a partition.
func queueDir(sys string, major, minor uint32) string {
	dev := filepath.Join(sys, "dev", "block", fmt.Sprintf("%d:%d", major, minor))
	if _, err := os.Stat(filepath.Join(dev, "partition")); err == nil {
		return filepath.Join(dev, "..", "queue")
	}
	return filepath.Join(dev, "queue")
}

// Reset makes the target read back zeros where that is cheap, and says whether it does:
// the writer may then skip zero blocks.
//
//   - A file is truncated to nothing: every byte not written afterwards reads as zero.
//   - A block device is zeroed with BLKZEROOUT over its whole capacity only when the
//     device offloads it (queue/write_zeroes_max_bytes > 0: WRITE ZEROES or an unmap the
//     device guarantees reads zeros) and is not rotational, where the offload may still
//     write every sector. discard_zeroes_data is not consulted: kernels since 4.12 always
//     report 0 there, and a plain discard promises nothing about what reads back.
//   - Any other device gets every block written, zeros included.
//
// Reset runs again before a retried write, since a partial write spoils what was known.
func (t *Target) Reset(ctx context.Context) (zeroesKnown bool, err error) {
	if !t.block {
		if err := t.f.Truncate(0); err != nil {
			return false, err
		}
		return true, nil
	}
	if !t.zeroOffloaded() {
		return false, nil
	}
	if err := t.zeroOut(ctx, 0, t.size); err != nil {
		// A refused offload is no failure: the image is then written whole.
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// zeroOffloaded reports whether BLKZEROOUT is cheap on the device.
func (t *Target) zeroOffloaded() bool {
	return readInt(filepath.Join(t.sys, "write_zeroes_max_bytes")) > 0 &&
		readInt(filepath.Join(t.sys, "rotational")) == 0
}

// zeroChunk bounds one BLKZEROOUT so that a cancelled context is noticed between chunks.
const zeroChunk = 16 << 30

func (t *Target) zeroOut(ctx context.Context, off, n int64) error {
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		c := min(n, zeroChunk)
		r := [2]uint64{uint64(off), uint64(c)}
		if err := ioctlPtr(t.f, unix.BLKZEROOUT, &r); err != nil {
			return fmt.Errorf("BLKZEROOUT: %w", err)
		}
		off += c
		n -= c
	}
	return nil
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v
}

// WriteAt writes p at off, refusing to write past a block device's end. On a device
// opened for direct writes the aligned middle of p goes around the page cache and its
// unaligned ends through it. Calls must not overlap.
func (t *Target) WriteAt(p []byte, off int64) error {
	if t.block && off+int64(len(p)) > t.size {
		return fmt.Errorf("the image is larger than the disk (%d bytes)", t.size)
	}
	head, mid := t.directSpan(p, off)
	if mid > 0 {
		if err := t.writeBuffered(p[:head], off); err != nil {
			return err
		}
		_, err := t.direct.WriteAt(p[head:head+mid], off+int64(head))
		switch {
		case err == nil:
			t.directBytes += int64(mid)
			p, off = p[head+mid:], off+int64(head+mid)
		case errors.Is(err, unix.EINVAL):
			// The device wants another alignment than it said: the page cache takes
			// this write and all that follow.
			t.direct.Close()
			t.direct = nil
			p, off = p[head:], off+int64(head)
		default:
			return err
		}
	}
	return t.writeBuffered(p, off)
}

func (t *Target) writeBuffered(p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	_, err := t.f.WriteAt(p, off)
	return err
}

// directSpan is where p, to be written at off, may be written directly: from p[head]
// for mid bytes, a multiple of the alignment whose offset and memory are aligned too;
// mid is 0 when nothing may.
func (t *Target) directSpan(p []byte, off int64) (head, mid int) {
	if t.direct == nil {
		return 0, 0
	}
	a := int64(t.align)
	head = int((a - off%a) % a)
	if head >= len(p) || uintptr(unsafe.Pointer(&p[head]))%uintptr(a) != 0 {
		return 0, 0
	}
	if mid = (len(p) - head) / t.align * t.align; mid == 0 {
		return 0, 0
	}
	return head, mid
}

// Finish makes the target hold exactly an image of length bytes (a file is cut or
// extended to it; a block device must hold it) and flushes it to stable storage.
func (t *Target) Finish(length int64) error {
	if t.block {
		if length > t.size {
			return fmt.Errorf("the image (%d bytes) is larger than the disk (%d bytes)", length, t.size)
		}
	} else if err := t.f.Truncate(length); err != nil {
		return err
	}
	return t.f.Sync()
}

// Wipe makes the disk unbootable: it zeroes the first and the last MiB, where the
// partition tables are (MBR, GPT header and entries, and the GPT backup), then syncs.
func (t *Target) Wipe() error {
	end := t.size
	if !t.block {
		st, err := t.f.Stat()
		if err != nil {
			return err
		}
		end = st.Size()
	}
	zero := make([]byte, MiB)
	for _, off := range []int64{0, max(0, end-MiB)} {
		n := min(int64(MiB), end-off)
		if n <= 0 {
			continue
		}
		if _, err := t.f.WriteAt(zero[:n], off); err != nil {
			return err
		}
	}
	return t.f.Sync()
}

// Discard tells a block device that none of its blocks hold data (BLKDISCARD over its
// whole capacity), so a solid disk forgets them. It reports false, with no error, for a
// file or a device that does not support discard; a discard promises nothing about what
// reads back afterwards.
func (t *Target) Discard() (bool, error) {
	if !t.block || t.size == 0 {
		return false, nil
	}
	r := [2]uint64{0, uint64(t.size)}
	err := ioctlPtr(t.f, unix.BLKDISCARD, &r)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("BLKDISCARD: %w", err)
	}
	return true, nil
}
