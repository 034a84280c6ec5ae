package qcow2

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// guestSink is a guest disk in memory that checks every byte is placed exactly once.
type guestSink struct {
	limit  int64 // the largest disk accepted; 0 is 256 MiB
	size   int64
	data   []byte
	placed []uint8
}

func (g *guestSink) Begin(size int64) error {
	if size > cmp.Or(g.limit, 1<<28) {
		return fmt.Errorf("test sink: %d bytes is too large", size)
	}
	g.size, g.data, g.placed = size, make([]byte, size), make([]uint8, size)
	return nil
}

func (g *guestSink) place(off, n int64) error {
	if off < 0 || n < 0 || off+n > g.size {
		return fmt.Errorf("place [%d, %d) outside a disk of %d", off, off+n, g.size)
	}
	for i := off; i < off+n; i++ {
		g.placed[i]++
	}
	return nil
}

func (g *guestSink) WriteAt(p []byte, off int64) error {
	if err := g.place(off, int64(len(p))); err != nil {
		return err
	}
	copy(g.data[off:], p)
	return nil
}

func (g *guestSink) Zero(off, n int64) error { return g.place(off, n) }

func (g *guestSink) check(t *testing.T, want []byte) {
	t.Helper()
	for i, c := range g.placed {
		if c != 1 {
			t.Fatalf("byte %d placed %d times", i, c)
		}
	}
	if !bytes.Equal(g.data, want) {
		t.Fatal("the guest disk differs from the image's content")
	}
}

// guest is n bytes of clusters of data and of zeros.
func guest(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, n)
	for off := 0; off < n; off += 4096 {
		if r.IntN(5) < 2 {
			continue
		}
		for i := off; i < min(n, off+4096); i++ {
			b[i] = byte(r.Uint32())
		}
	}
	return b
}

// layout orders the parts of a built image.
type layout int

const (
	tablesFirst layout = iota // header, L1, then each L2 table before its data
	dataFirst                 // header, data, L2 tables, L1 last
)

// build writes a version 3 qcow2 image of disk with clusters of 1<<bits bytes.
func build(disk []byte, bits uint32, order layout) []byte {
	cs := int64(1) << bits
	n := cs / 8
	size := int64(len(disk))
	clusters := (size + cs - 1) / cs
	l1Size := (clusters + n - 1) / n
	type l2 struct{ entries []uint64 }
	tables := make([]l2, l1Size)
	var dataClusters []int64 // guest cluster indexes with data, in order
	for g := range clusters {
		c := disk[g*cs : min(size, (g+1)*cs)]
		if bytes.Count(c, []byte{0}) == len(c) {
			continue
		}
		dataClusters = append(dataClusters, g)
	}
	out := make([]byte, cs) // cluster 0: the header
	alloc := func(p []byte) int64 {
		off := int64(len(out))
		out = append(out, p...)
		out = append(out, make([]byte, (cs-int64(len(p))%cs)%cs)...)
		return off
	}
	for i := range tables {
		tables[i].entries = make([]uint64, n)
	}
	l1 := make([]byte, l1Size*8)
	var l1Off int64
	putTables := func() []int64 {
		offs := make([]int64, l1Size)
		for i, t := range tables {
			b := make([]byte, cs)
			for j, e := range t.entries {
				binary.BigEndian.PutUint64(b[j*8:], e)
			}
			offs[i] = alloc(b)
			binary.BigEndian.PutUint64(l1[i*8:], uint64(offs[i])|1<<63)
		}
		return offs
	}
	switch order {
	case tablesFirst:
		l1Off = alloc(l1)
		// Reserve the tables, then fill them as data lands after them.
		offs := putTables()
		for _, g := range dataClusters {
			off := alloc(disk[g*cs : min(size, (g+1)*cs)])
			i, j := g/n, g%n
			binary.BigEndian.PutUint64(out[offs[i]+j*8:], uint64(off)|1<<63)
		}
		copy(out[l1Off:], l1)
	case dataFirst:
		for _, g := range dataClusters {
			off := alloc(disk[g*cs : min(size, (g+1)*cs)])
			tables[g/n].entries[g%n] = uint64(off) | 1<<63
		}
		putTables()
		l1Off = alloc(l1)
	}
	be := binary.BigEndian
	be.PutUint32(out[0:], Magic)
	be.PutUint32(out[4:], 3)
	be.PutUint32(out[20:], bits)
	be.PutUint64(out[24:], uint64(size))
	be.PutUint32(out[36:], uint32(l1Size))
	be.PutUint64(out[40:], uint64(l1Off))
	be.PutUint32(out[96:], 4) // refcount order
	be.PutUint32(out[100:], headerLen)
	return out
}

func TestConvertLayouts(t *testing.T) {
	disk := guest(5<<20+1234, 1)
	cases := map[string]struct {
		bits    uint32
		order   layout
		limits  Limits
		wantErr error
	}{
		"tables first, 64 KiB clusters": {16, tablesFirst, Limits{}, nil},
		"tables first, 512 B clusters":  {9, tablesFirst, Limits{}, nil},
		"data first, kept in memory":    {16, dataFirst, Limits{}, nil},
		"data first, over the limit":    {16, dataFirst, Limits{Pending: 1 << 20}, ErrUnsupported},
		"tables first, too far ahead":   {12, tablesFirst, Limits{Ahead: 10}, ErrUnsupported},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			img := build(disk, tc.bits, tc.order)
			var sink guestSink
			_, err := Convert(bytes.NewReader(img), &sink, tc.limits)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Convert: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sink.check(t, disk)
		})
	}
}

func TestConvertRefuses(t *testing.T) {
	disk := guest(1<<20, 2)
	good := build(disk, 16, tablesFirst)
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	be := binary.BigEndian
	cases := map[string]struct {
		img  []byte
		want error
	}{
		"no magic":       {edit(func(b []byte) []byte { b[0] = 'X'; return b }), ErrMalformed},
		"version 4":      {edit(func(b []byte) []byte { be.PutUint32(b[4:], 4); return b }), ErrUnsupported},
		"backing file":   {edit(func(b []byte) []byte { be.PutUint64(b[8:], 512); return b }), ErrUnsupported},
		"encrypted":      {edit(func(b []byte) []byte { be.PutUint32(b[32:], 1); return b }), ErrUnsupported},
		"marked corrupt": {edit(func(b []byte) []byte { be.PutUint64(b[72:], featureCorrupt); return b }), ErrMalformed},
		"external data":  {edit(func(b []byte) []byte { be.PutUint64(b[72:], featureExternalData); return b }), ErrUnsupported},
		"subclusters":    {edit(func(b []byte) []byte { be.PutUint64(b[72:], featureExtendedL2); return b }), ErrUnsupported},
		"huge clusters":  {edit(func(b []byte) []byte { be.PutUint32(b[20:], 30); return b }), ErrMalformed},
		"short L1":       {edit(func(b []byte) []byte { be.PutUint32(b[36:], 0); return b }), ErrMalformed},
		"truncated":      {good[:len(good)/2], ErrMalformed},
		"compressed cluster": {edit(func(b []byte) []byte {
			l2 := int64(be.Uint64(b[be.Uint64(b[40:]):]) & offsetMask)
			b[l2] |= 0x40
			return b
		}), ErrUnsupported},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var sink guestSink
			if _, err := Convert(bytes.NewReader(tc.img), &sink, Limits{}); !errors.Is(err, tc.want) {
				t.Fatalf("Convert: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestConvertQemuImg checks images made by qemu-img itself, in the layouts and
// versions it writes.
func TestConvertQemuImg(t *testing.T) {
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Skip("qemu-img is not installed (make deps installs qemu-utils)")
	}
	disk := guest(9<<20+4096, 3)
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	if err := os.WriteFile(raw, disk, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		args []string
		want error
	}{
		"default":               {[]string{"-O", "qcow2"}, nil},
		"version 2":             {[]string{"-O", "qcow2", "-o", "compat=0.10"}, nil},
		"4 KiB clusters":        {[]string{"-O", "qcow2", "-o", "cluster_size=4096"}, nil},
		"2 MiB clusters":        {[]string{"-O", "qcow2", "-o", "cluster_size=2M"}, nil},
		"metadata preallocated": {[]string{"-O", "qcow2", "-o", "preallocation=metadata"}, nil},
		"compressed":            {[]string{"-O", "qcow2", "-c"}, ErrUnsupported},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			img := filepath.Join(dir, name+".qcow2")
			args := append([]string{"convert", "-f", "raw"}, tc.args...)
			if out, err := exec.Command(qemuImg, append(args, raw, img)...).CombinedOutput(); err != nil {
				t.Fatalf("qemu-img: %v\n%s", err, out)
			}
			f, err := os.Open(img)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var sink guestSink
			_, err = Convert(f, &sink, Limits{})
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("Convert: %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sink.check(t, disk)
		})
	}
}
