// Package gpt reads the GUID partition table of a written disk, so that the ramdisk
// can find the OS's root, boot and EFI partitions by type GUID or name.
package gpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"unicode/utf16"
)

// Partition type GUIDs the ramdisk looks for.
const (
	TypeESP       = "c12a7328-f81f-11d2-ba4b-00a0c93ec93b"
	TypeLinuxData = "0fc63daf-8483-4772-8e79-3d69d8477de4"
	// TypeRootX86_64 is the Discoverable Partitions Specification's root for x86-64.
	TypeRootX86_64 = "4f68bce3-e8cd-4db1-96e7-fbcaf984b709"
	// TypeXBOOTLDR is the Boot Loader Specification's extended boot partition.
	TypeXBOOTLDR = "bc13c2ff-59e6-4262-a352-b275fd6f7172"
)

// Partition is one used entry of the table.
type Partition struct {
	// Number counts from 1, as the kernel names partitions.
	Number int
	// Type and UUID are lower-case GUIDs.
	Type string
	UUID string
	// Name is the partition's label in the table (not its file system's).
	Name string
	// Offset and Size are in bytes.
	Offset, Size int64
}

// ErrNoTable means the disk has no valid GPT.
var ErrNoTable = errors.New("no GUID partition table")

// The table's limits: the header is at LBA 1, and entries arrays beyond 1 MiB are not
// made by any partitioning tool.
const maxEntriesBytes = 1 << 20

// Read reads the primary table of a disk with the given logical sector size.
func Read(r io.ReaderAt, sectorSize int64) ([]Partition, error) {
	hdr := make([]byte, 92)
	if _, err := r.ReadAt(hdr, sectorSize); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoTable, err)
	}
	le := binary.LittleEndian
	if string(hdr[:8]) != "EFI PART" {
		return nil, ErrNoTable
	}
	size := le.Uint32(hdr[12:])
	if size < 92 || int64(size) > sectorSize {
		return nil, fmt.Errorf("%w: header of %d bytes", ErrNoTable, size)
	}
	full := make([]byte, size)
	if _, err := r.ReadAt(full, sectorSize); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoTable, err)
	}
	want := le.Uint32(full[16:])
	clear(full[16:20])
	if crc32.ChecksumIEEE(full) != want {
		return nil, fmt.Errorf("%w: header checksum", ErrNoTable)
	}
	entriesLBA, count, entrySize := le.Uint64(hdr[72:]), le.Uint32(hdr[80:]), le.Uint32(hdr[84:])
	if entrySize < 128 || entrySize%8 != 0 || uint64(count)*uint64(entrySize) > maxEntriesBytes || entriesLBA > 1<<40 {
		return nil, fmt.Errorf("%w: %d entries of %d bytes", ErrNoTable, count, entrySize)
	}
	entries := make([]byte, int(count)*int(entrySize))
	if _, err := r.ReadAt(entries, int64(entriesLBA)*sectorSize); err != nil {
		return nil, fmt.Errorf("%w: entries: %v", ErrNoTable, err)
	}
	if crc32.ChecksumIEEE(entries) != le.Uint32(hdr[88:]) {
		return nil, fmt.Errorf("%w: entries checksum", ErrNoTable)
	}
	var parts []Partition
	for i := range int(count) {
		e := entries[i*int(entrySize):]
		if bytes.Equal(e[:16], make([]byte, 16)) {
			continue
		}
		first, last := le.Uint64(e[32:]), le.Uint64(e[40:])
		if last < first || last > 1<<48 {
			return nil, fmt.Errorf("%w: partition %d spans LBA %d to %d", ErrNoTable, i+1, first, last)
		}
		parts = append(parts, Partition{Number: i + 1, Type: GUID(e[:16]), UUID: GUID(e[16:32]), Name: name(e[56:128]),
			Offset: int64(first) * sectorSize, Size: int64(last-first+1) * sectorSize})
	}
	return parts, nil
}

// GUID spells 16 bytes of a GPT GUID (its first three fields little-endian) in
// lower case.
func GUID(b []byte) string {
	le := binary.LittleEndian
	return fmt.Sprintf("%08x-%04x-%04x-%x-%x", le.Uint32(b), le.Uint16(b[4:]), le.Uint16(b[6:]), b[8:10], b[10:16])
}

// name decodes a partition name: UTF-16LE, NUL-terminated.
func name(b []byte) string {
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		c := binary.LittleEndian.Uint16(b[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return string(utf16.Decode(u))
}

// Named returns the partition whose name is one of names (in any case), if any.
func Named(parts []Partition, names ...string) (Partition, bool) {
	for _, p := range parts {
		for _, n := range names {
			if strings.EqualFold(p.Name, n) {
				return p, true
			}
		}
	}
	return Partition{}, false
}

// Root picks the OS's root partition: the x86-64 root type, else one named root,
// rootfs or cloudimg-rootfs, else the largest Linux data partition.
func Root(parts []Partition) (Partition, bool) {
	for _, p := range parts {
		if p.Type == TypeRootX86_64 {
			return p, true
		}
	}
	if p, ok := Named(parts, "root", "rootfs", "cloudimg-rootfs"); ok {
		return p, true
	}
	var best Partition
	for _, p := range parts {
		if p.Type == TypeLinuxData && p.Size > best.Size {
			best = p
		}
	}
	return best, best.Number != 0
}
