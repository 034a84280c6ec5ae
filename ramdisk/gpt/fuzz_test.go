package gpt

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"regexp"
	"testing"
	"unicode/utf8"
)

var guidShape = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// FuzzRead reads disks whose table has the fields and entries the fuzzer chooses and
// valid checksums (random checksums would stop every input at the header): the result
// is an error or partitions numbered in order with well-formed GUIDs and a size.
func FuzzRead(f *testing.F) {
	entry := make([]byte, 128)
	copy(entry, []byte{0x28, 0x73, 0x2a, 0xc1, 0x1f, 0xf8, 0xd2, 0x11, 0xba, 0x4b, 0x00, 0xa0, 0xc9, 0x3e, 0xc9, 0x3b})
	entry[16] = 1
	binary.LittleEndian.PutUint64(entry[32:], 2048)
	binary.LittleEndian.PutUint64(entry[40:], 4095)
	copy(entry[56:], []byte{'E', 0, 'F', 0, 'I', 0})
	f.Add(append(entry, make([]byte, 128)...), uint32(2), uint32(128), uint64(2), uint32(92), false)
	f.Add(entry, uint32(1), uint32(128), uint64(2), uint32(92), true)
	f.Add(entry, uint32(1), uint32(136), uint64(1<<40), uint32(93), false)
	f.Add([]byte{}, uint32(1<<20), uint32(128), uint64(2), uint32(512), false)
	f.Fuzz(func(t *testing.T, entries []byte, count, entrySize uint32, entriesLBA uint64, headerSize uint32, big bool) {
		sectorSize := int64(512)
		if big {
			sectorSize = 4096
		}
		le := binary.LittleEndian
		hdr := make([]byte, sectorSize)
		copy(hdr, "EFI PART")
		le.PutUint32(hdr[8:], 0x00010000)
		le.PutUint32(hdr[12:], headerSize)
		le.PutUint64(hdr[72:], entriesLBA)
		le.PutUint32(hdr[80:], count)
		le.PutUint32(hdr[84:], entrySize)
		if n := uint64(count) * uint64(entrySize); n <= uint64(len(entries)) {
			le.PutUint32(hdr[88:], crc32.ChecksumIEEE(entries[:n]))
		}
		if headerSize >= 92 && int64(headerSize) <= sectorSize {
			le.PutUint32(hdr[16:], crc32.ChecksumIEEE(hdr[:headerSize]))
		}
		disk := append(make([]byte, sectorSize), hdr...)
		if entriesLBA >= 2 && entriesLBA < 8 {
			disk = append(disk, make([]byte, (int64(entriesLBA)-2)*sectorSize)...)
			disk = append(disk, entries...)
		}
		parts, err := Read(bytes.NewReader(disk), sectorSize)
		if err != nil {
			return
		}
		last := 0
		for _, p := range parts {
			if p.Number <= last || p.Number > int(count) {
				t.Fatalf("partition %d after %d of %d", p.Number, last, count)
			}
			last = p.Number
			if !guidShape.MatchString(p.Type) || !guidShape.MatchString(p.UUID) {
				t.Fatalf("GUIDs %q %q", p.Type, p.UUID)
			}
			if p.Offset < 0 || p.Size < sectorSize || p.Size%sectorSize != 0 || p.Offset > p.Offset+p.Size {
				t.Fatalf("partition at %d of %d bytes", p.Offset, p.Size)
			}
			if !utf8.ValidString(p.Name) {
				t.Fatalf("name %q", p.Name)
			}
		}
	})
}
