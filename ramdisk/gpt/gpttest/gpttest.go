// Package gpttest writes GUID partition tables onto disk images for tests, so that
// tests need no partitioning tool.
package gpttest

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"strings"
	"testing"
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

// OSImage writes a 64 MiB disk image at path like a small OS's: a GPT with an EFI
// system partition and one 16 MiB ext4 partition (Linux data) per name, made with
// mkfs.ext4. It skips the test unless it runs as root (to mount the result) with
// mkfs.ext4 installed.
func OSImage(t testing.TB, path string, names ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting the written OS needs root")
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("mkfs.ext4 is not installed (make deps installs e2fsprogs)")
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 64 << 20
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	parts := []Part{{Type: typeESP, UUID: "aaaaaaaa-0000-0000-0000-000000000001", Name: "EFI-SYSTEM", FirstLBA: 2048, LastLBA: 4095}}
	for i, name := range names {
		first := uint64(4096 + i*32768)
		parts = append(parts, Part{Type: typeLinuxData, UUID: fmt.Sprintf("aaaaaaaa-0000-0000-0000-%012d", i+2),
			Name: name, FirstLBA: first, LastLBA: first + 32767})
		out, err := exec.Command(mkfs, "-q", "-F", "-E", fmt.Sprintf("offset=%d", first*512), path, "16M").CombinedOutput()
		if err != nil {
			t.Fatalf("mkfs.ext4: %v\n%s", err, out)
		}
	}
	if err := Write(f, size/512, parts); err != nil {
		t.Fatal(err)
	}
}

// The type GUIDs OSImage uses (the gpt package's, repeated so as not to import it).
const (
	typeESP       = "c12a7328-f81f-11d2-ba4b-00a0c93ec93b"
	typeLinuxData = "0fc63daf-8483-4772-8e79-3d69d8477de4"
)
