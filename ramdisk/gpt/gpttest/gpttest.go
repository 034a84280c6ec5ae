// Package gpttest writes GUID partition tables onto disk images for tests, so that
// tests need no partitioning tool.
package gpttest

import (
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"os"
	"strings"
	"unicode/utf16"
)

// Part is one partition to create, in 512-byte sectors.
type Part struct {
	Type, UUID, Name  string
	FirstLBA, LastLBA uint64
}

// guid is the on-disk form of a GUID spelled with hyphens.
func guid(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != 16 {
		panic("gpttest: bad GUID " + s)
	}
	b[0], b[1], b[2], b[3] = b[3], b[2], b[1], b[0]
	b[4], b[5] = b[5], b[4]
	b[6], b[7] = b[7], b[6]
	return b
}

// Write writes a primary and a backup table (128 entries) onto a disk image of
// sectors 512-byte sectors.
func Write(f *os.File, sectors uint64, parts []Part) error {
	le := binary.LittleEndian
	entries := make([]byte, 128*128)
	for i, p := range parts {
		e := entries[i*128:]
		copy(e, guid(p.Type))
		copy(e[16:], guid(p.UUID))
		le.PutUint64(e[32:], p.FirstLBA)
		le.PutUint64(e[40:], p.LastLBA)
		for j, c := range utf16.Encode([]rune(p.Name)) {
			le.PutUint16(e[56+2*j:], c)
		}
	}
	header := func(self, other, entriesLBA uint64) []byte {
		h := make([]byte, 512)
		copy(h, "EFI PART")
		le.PutUint32(h[8:], 0x00010000)
		le.PutUint32(h[12:], 92)
		le.PutUint64(h[24:], self)
		le.PutUint64(h[32:], other)
		le.PutUint64(h[40:], 34)
		le.PutUint64(h[48:], sectors-34)
		copy(h[56:], guid("11111111-2222-3333-4444-555555555555"))
		le.PutUint64(h[72:], entriesLBA)
		le.PutUint32(h[80:], 128)
		le.PutUint32(h[84:], 128)
		le.PutUint32(h[88:], crc32.ChecksumIEEE(entries))
		le.PutUint32(h[16:], crc32.ChecksumIEEE(h[:92]))
		return h
	}
	writes := []struct {
		b   []byte
		lba uint64
	}{
		{header(1, sectors-1, 2), 1}, {entries, 2},
		{entries, sectors - 33}, {header(sectors-1, 1, sectors-33), sectors - 1},
	}
	for _, w := range writes {
		if _, err := f.WriteAt(w.b, int64(w.lba)*512); err != nil {
			return err
		}
	}
	return nil
}
