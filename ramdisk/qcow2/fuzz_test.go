package qcow2

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// reference reads a qcow2 image held whole, with random access, as the format's
// specification lays it out: a second reader, apart from the streaming one, that
// FuzzConvert holds Convert to.
type reference struct {
	img []byte
	h   Header
}

// u64 is the big-endian entry at off; zero past the image's end.
func (r reference) u64(off int64) uint64 {
	var b [8]byte
	if off >= 0 && off < int64(len(r.img)) {
		copy(b[:], r.img[off:])
	}
	return binary.BigEndian.Uint64(b[:])
}

// cluster is guest cluster g as the image maps it: the data cluster its L2 entry names,
// zero-padded past the image's end, or nil where it reads as zeros (no L2 table, no
// data cluster, or version 3's zero flag).
func (r reference) cluster(g int64) []byte {
	const (
		offsetBits = 0x00fffffffffffe00 // bits 9-55 of an L1 or L2 entry
		zeroBit    = 1                  // an L2 entry's "reads as zeros", version 3
	)
	cs := r.h.ClusterSize()
	perTable := cs / 8
	l2 := int64(r.u64(int64(r.h.L1Offset)+g/perTable*8) & offsetBits)
	if l2 == 0 {
		return nil
	}
	e := r.u64(l2 + g%perTable*8)
	off := int64(e & offsetBits)
	if off == 0 || (r.h.Version >= 3 && e&zeroBit != 0) {
		return nil
	}
	c := make([]byte, cs)
	if off < int64(len(r.img)) {
		copy(c, r.img[off:])
	}
	return c
}

// unmapped reports whether guest cluster g has no L2 table at all, and so the whole
// table's span reads as zeros.
func (r reference) unmapped(g int64) bool {
	perTable := r.h.ClusterSize() / 8
	return r.u64(int64(r.h.L1Offset)+g/perTable*8)&0x00fffffffffffe00 == 0
}

// referenceSink checks each placement Convert makes against the reference reading of
// the image: a write is a whole guest cluster (cut at the disk's end) holding what the
// image maps there, a zeroed range holds only clusters that read as zeros, nothing lands
// outside the disk, and every byte is placed once. Its first finding fails the
// conversion.
type referenceSink struct {
	ref    reference
	size   int64
	placed [][2]int64 // [from, to) ranges placed, adjacent ones merged
	err    error
}

func (s *referenceSink) Begin(size int64) error { s.size = size; return nil }

func (s *referenceSink) fail(format string, args ...any) error {
	if s.err == nil {
		s.err = fmt.Errorf(format, args...)
	}
	return s.err
}

func (s *referenceSink) place(off, n int64) error {
	cs := s.ref.h.ClusterSize()
	if off < 0 || n <= 0 || off+n > s.size || off%cs != 0 {
		return s.fail("[%d, %d) placed on a disk of %d bytes in clusters of %d", off, off+n, s.size, cs)
	}
	if last := len(s.placed) - 1; last >= 0 && s.placed[last][1] == off {
		s.placed[last][1] = off + n
	} else {
		s.placed = append(s.placed, [2]int64{off, off + n})
	}
	return nil
}

func (s *referenceSink) WriteAt(p []byte, off int64) error {
	if err := s.place(off, int64(len(p))); err != nil {
		return err
	}
	cs := s.ref.h.ClusterSize()
	want := s.ref.cluster(off / cs)
	switch {
	case int64(len(p)) != min(cs, s.size-off):
		return s.fail("%d bytes written at %d, not a cluster of %d cut at the disk's end", len(p), off, cs)
	case want == nil:
		return s.fail("data written at %d, where the image reads zeros", off)
	case !bytes.Equal(p, want[:len(p)]):
		return s.fail("the cluster written at %d is not the one the image maps there", off)
	}
	return nil
}

func (s *referenceSink) Zero(off, n int64) error {
	if err := s.place(off, n); err != nil {
		return err
	}
	cs := s.ref.h.ClusterSize()
	perTable := cs / 8
	for g := off / cs; g*cs < off+n; g++ {
		if s.ref.unmapped(g) {
			g = (g/perTable+1)*perTable - 1
			continue
		}
		if s.ref.cluster(g) != nil {
			return s.fail("guest cluster %d zeroed, which the image maps to data", g)
		}
	}
	return nil
}

// covered checks that the ranges placed cover the disk once each.
func (s *referenceSink) covered() error {
	slices.SortFunc(s.placed, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	at := int64(0)
	for _, r := range s.placed {
		if r[0] != at {
			return fmt.Errorf("[%d, %d) placed after the disk's first %d bytes", r[0], r[1], at)
		}
		at = r[1]
	}
	if at != s.size {
		return fmt.Errorf("%d bytes of a disk of %d placed", at, s.size)
	}
	return nil
}

// convertAgainstReference converts img and checks every placement against the reference
// reading; it returns Convert's own refusal, or nil.
func convertAgainstReference(t *testing.T, img []byte) error {
	t.Helper()
	h, perr := ParseHeader(img[:min(len(img), headerLen)])
	sink := referenceSink{ref: reference{img: img, h: h}}
	_, err := Convert(bytes.NewReader(img), &sink, Limits{Pending: 1 << 20, Ahead: 1 << 12})
	switch {
	case sink.err != nil:
		t.Fatal(sink.err)
	case err == nil && perr != nil:
		t.Fatalf("converted an image whose header does not parse: %v", perr)
	case err == nil:
		if cerr := sink.covered(); cerr != nil {
			t.Fatal(cerr)
		}
	}
	return err
}

// readWhole is the guest disk the reference reads of img, cluster by cluster.
func readWhole(t *testing.T, img []byte) []byte {
	t.Helper()
	h, err := ParseHeader(img)
	if err != nil {
		t.Fatal(err)
	}
	ref := reference{img: img, h: h}
	var disk []byte
	for g := range h.Clusters() {
		c := ref.cluster(g)
		if c == nil {
			c = make([]byte, h.ClusterSize())
		}
		disk = append(disk, c...)
	}
	return disk[:h.Size]
}

// TestReferenceReads holds the reference reader FuzzConvert compares with to the guest
// disks it is given: the disk each of the fuzz target's seeds was built from, and the
// raw disk qemu-img made a qcow2 image of, in the versions and cluster sizes it writes.
// Convert agrees with it on each.
func TestReferenceReads(t *testing.T) {
	images := map[string][2][]byte{}
	for name, seed := range convertSeeds() {
		images[name] = seed
	}
	if qemuImg, err := exec.LookPath("qemu-img"); err == nil {
		disk := guest(3<<20+4096, 8)
		dir := t.TempDir()
		raw := filepath.Join(dir, "disk.raw")
		if err := os.WriteFile(raw, disk, 0o600); err != nil {
			t.Fatal(err)
		}
		for name, opts := range map[string]string{"qemu-img": "compat=1.1", "qemu-img, version 2": "compat=0.10", "qemu-img, 4 KiB clusters": "cluster_size=4096"} {
			out := filepath.Join(dir, "disk.qcow2")
			if b, err := exec.Command(qemuImg, "convert", "-f", "raw", "-O", "qcow2", "-o", opts, raw, out).CombinedOutput(); err != nil {
				t.Fatalf("qemu-img: %v\n%s", err, b)
			}
			img, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			images[name] = [2][]byte{img, disk}
		}
	} else {
		t.Log("qemu-img is not installed (make deps installs qemu-utils): the seeds alone")
	}
	for name, im := range images {
		if got := readWhole(t, im[0]); !bytes.Equal(got, im[1]) {
			t.Errorf("%s: the reference reads a guest disk of %d bytes other than the %d it holds", name, len(got), len(im[1]))
		}
		if err := convertAgainstReference(t, im[0]); err != nil {
			t.Errorf("%s: Convert: %v", name, err)
		}
	}
}

// convertSeeds are the images FuzzConvert starts from and the guest disk each holds, by
// name: both layouts build writes, and a version 2 image (its L2 entries' low bit no
// zero flag).
func convertSeeds() map[string][2][]byte {
	v2disk := guest(64<<10, 6)
	v2 := build(v2disk, 9, tablesFirst)
	binary.BigEndian.PutUint32(v2[4:], 2)
	tables, data := guest(64<<10, 4), guest(64<<10, 5)
	return map[string][2][]byte{
		"tables first": {build(tables, 9, tablesFirst), tables},
		"data first":   {build(data, 9, dataFirst), data},
		"version 2":    {v2, v2disk},
	}
}

// FuzzConvert feeds arbitrary bytes to the converter: it never panics; each cluster it
// writes is the one a reference reader of the whole image finds mapped there, each range
// it zeroes is one that reader finds reading as zeros, nothing lands outside the disk it
// announced, and an image it accepts has every byte of its disk placed once.
func FuzzConvert(f *testing.F) {
	for _, seed := range convertSeeds() {
		f.Add(seed[0])
	}
	f.Add([]byte("QFI\xfb"))
	f.Fuzz(func(t *testing.T, img []byte) {
		convertAgainstReference(t, img)
	})
}
