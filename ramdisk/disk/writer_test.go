package disk

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// memSink is a disk in memory that starts as zeros and records every write.
type memSink struct {
	mu     sync.Mutex
	data   []byte
	writes int
	fail   error
}

func (m *memSink) WriteAt(p []byte, off int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	if need := int(off) + len(p); need > len(m.data) {
		m.data = append(m.data, make([]byte, need-len(m.data))...)
	}
	copy(m.data[off:], p)
	m.writes++
	return nil
}

// image is n bytes of runs: data, short zero runs, long zero runs.
func image(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, 0, n)
	for len(b) < n {
		run := min(n-len(b), 1+r.IntN(256*1024))
		switch r.IntN(3) {
		case 0:
			b = append(b, make([]byte, run)...)
		default:
			for range run {
				b = append(b, byte(r.UintN(255)+1))
			}
		}
	}
	return b
}

func TestWriterContent(t *testing.T) {
	img := image(3*BlockSize+12345, 7)
	zeros := 0
	for _, c := range img {
		if c == 0 {
			zeros++
		}
	}
	cases := map[string]struct {
		zeroesKnown bool
		chunk       int
	}{
		"zeros known, small writes":   {true, 1000},
		"zeros known, large writes":   {true, 3 * MiB},
		"zeros unknown, small writes": {false, 4097},
		"zeros unknown, large writes": {false, 5 * MiB},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sink := &memSink{}
			var last Counts
			w := NewWriter(sink, tc.zeroesKnown, func(c Counts) { last = c })
			for p := img; len(p) > 0; {
				n := min(len(p), tc.chunk)
				if _, err := w.Write(p[:n]); err != nil {
					t.Fatal(err)
				}
				p = p[n:]
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			got := append(sink.data, make([]byte, int(w.End())-len(sink.data))...)
			if !bytes.Equal(got, img) {
				t.Fatal("the disk does not hold the image")
			}
			c := w.Counts()
			if c != last {
				t.Errorf("last callback %+v, final counts %+v", last, c)
			}
			if c.Written+c.Skipped != int64(len(img)) {
				t.Errorf("written %d + skipped %d != %d", c.Written, c.Skipped, len(img))
			}
			if tc.zeroesKnown && (c.Skipped == 0 || c.Skipped > int64(zeros)) {
				t.Errorf("skipped %d of %d zero bytes", c.Skipped, zeros)
			}
			if !tc.zeroesKnown && c.Skipped != 0 {
				t.Errorf("skipped %d bytes on a disk whose zeros are unknown", c.Skipped)
			}
		})
	}
}

func TestWriterAtAndZero(t *testing.T) {
	for name, known := range map[string]bool{"zeros known": true, "zeros unknown": false} {
		t.Run(name, func(t *testing.T) {
			sink := &memSink{data: bytes.Repeat([]byte{0xee}, 0)}
			w := NewWriter(sink, known, nil)
			a := bytes.Repeat([]byte{1}, 70000)
			if err := w.WriteAt(a, 1<<20); err != nil {
				t.Fatal(err)
			}
			if err := w.WriteAt(a, 0); err != nil {
				t.Fatal(err)
			}
			if err := w.Zero(2<<20, 1<<20); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 3<<20)
			copy(want, a)
			copy(want[1<<20:], a)
			got := append(sink.data, make([]byte, int(w.End())-len(sink.data))...)
			if diff := cmp.Diff(len(want), len(got)); diff != "" || !bytes.Equal(want, got) {
				t.Fatalf("content differs (length -want +got):\n%s", diff)
			}
		})
	}
}

func TestWriterError(t *testing.T) {
	boom := errors.New("disk on fire")
	w := NewWriter(&memSink{fail: boom}, false, nil)
	var err error
	for i := 0; i < 10 && err == nil; i++ {
		_, err = w.Write(make([]byte, BlockSize))
	}
	if cerr := w.Close(); !errors.Is(cerr, boom) {
		t.Fatalf("Close: %v, want %v", cerr, boom)
	}
}

// spanSink records where each write landed.
type spanSink struct {
	memSink
	offs []int64
}

func (s *spanSink) WriteAt(p []byte, off int64) error {
	s.mu.Lock()
	s.offs = append(s.offs, off)
	s.mu.Unlock()
	return s.memSink.WriteAt(p, off)
}

// TestWriterZeroWrites hands the writer what a zstd decoder does: the image in writes of
// up to 128 KiB, some of them all zeros, from an offset off the page grid. Zero writes
// are left out where the disk reads zeros, and everything after a skip still starts on
// the grid, so that it may be written directly.
func TestWriterZeroWrites(t *testing.T) {
	const start = 1000
	data := func(n int, v byte) []byte { return bytes.Repeat([]byte{v}, n) }
	writes := [][]byte{
		data(128<<10, 1), make([]byte, 128<<10), make([]byte, 128<<10), data(100<<10, 2),
		make([]byte, 200<<10+17), data(5000, 3), make([]byte, minSkip-1), data(3, 4),
		make([]byte, minSkip+granule+1), data(granule, 5), make([]byte, 1000),
	}
	var img []byte
	for _, p := range writes {
		img = append(img, p...)
	}
	for name, known := range map[string]bool{"zeros known": true, "zeros unknown": false} {
		t.Run(name, func(t *testing.T) {
			sink := &spanSink{}
			w := NewWriter(sink, known, nil)
			off := int64(start)
			for _, p := range writes {
				if err := w.WriteAt(p, off); err != nil {
					t.Fatal(err)
				}
				off += int64(len(p))
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			want := append(make([]byte, start), img...)
			got := append(sink.data, make([]byte, int(w.End())-len(sink.data))...)
			if !bytes.Equal(got, want) {
				t.Fatal("the disk does not hold the image")
			}
			c := w.Counts()
			if c.Written+c.Skipped != int64(len(img)) {
				t.Errorf("written %d + skipped %d != %d", c.Written, c.Skipped, len(img))
			}
			if !known {
				if c.Skipped != 0 {
					t.Errorf("skipped %d bytes on a disk whose zeros are unknown", c.Skipped)
				}
				return
			}
			// Of the zero writes, 128 KiB twice, 200 KiB and 68 KiB hold whole granules
			// enough to skip, less what lies off the grid at their ends.
			if min := int64(2*128<<10 + 200<<10 + minSkip - 2*granule); c.Skipped < min {
				t.Errorf("skipped %d bytes, want at least %d", c.Skipped, min)
			}
			for i, o := range sink.offs {
				if i > 0 && o%granule != 0 {
					t.Errorf("write %d at %d, off the %d-byte grid", i, o, granule)
				}
			}
		})
	}
}
