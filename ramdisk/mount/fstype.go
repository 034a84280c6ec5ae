package mount

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
)

// ErrUnknownFS means no supported file system was recognised.
var ErrUnknownFS = errors.New("no ext4, xfs, btrfs or vfat file system")

// FSType tells a partition's file system from its superblock: ext4 (which mounts ext2
// and ext3 too), xfs, btrfs or vfat.
func FSType(r io.ReaderAt) (string, error) {
	b := make([]byte, 0x10048)
	n, _ := r.ReadAt(b, 0)
	b = b[:n]
	switch {
	case len(b) >= 1082 && binary.LittleEndian.Uint16(b[1080:]) == 0xef53:
		return "ext4", nil
	case len(b) >= 4 && string(b[:4]) == "XFSB":
		return "xfs", nil
	case len(b) >= 0x10048 && string(b[0x10040:0x10048]) == "_BHRfS_M":
		return "btrfs", nil
	case len(b) >= 512 && b[510] == 0x55 && b[511] == 0xaa &&
		(bytes.HasPrefix(b[82:], []byte("FAT32")) || bytes.HasPrefix(b[54:], []byte("FAT1"))):
		return "vfat", nil
	}
	return "", ErrUnknownFS
}
