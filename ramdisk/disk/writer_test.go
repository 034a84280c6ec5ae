package disk

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
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

// writerGoroutines counts the goroutines running a Writer's writes: a goroutine's
// function has returned once it is gone from the stacks, whether or not the goroutine
// itself has exited yet.
func writerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("disk.(*Writer).run("))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestWriterContent writes an image of many zero runs and an odd tail, in writes of
// several sizes, with one and with several blocks in flight: the disk holds the image,
// the counts add up, every callback reports no less than the one before it, and no
// goroutine is left after Close.
func TestWriterContent(t *testing.T) {
	img := image(9*BlockSize+12345, 7)
	zeros := 0
	for _, c := range img {
		if c == 0 {
			zeros++
		}
	}
	cases := map[string]struct {
		zeroesKnown bool
		chunk       int
		inFlight    int
	}{
		"zeros known, small writes":                {true, 1000, 1},
		"zeros known, large writes":                {true, 3 * MiB, 1},
		"zeros unknown, small writes":              {false, 4097, 1},
		"zeros unknown, large writes":              {false, 5 * MiB, 1},
		"zeros known, small writes, 2 in flight":   {true, 1000, 2},
		"zeros known, 128 KiB writes, 3 in flight": {true, 128 << 10, 3},
		"zeros unknown, large writes, 2 in flight": {false, 5 * MiB, 2},
		"zeros unknown, odd writes, 4 in flight":   {false, 100003, 4},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sink := &memSink{}
			var calls []Counts
			before := writerGoroutines()
			w := NewWriter(sink, tc.inFlight, tc.zeroesKnown, func(c Counts) { calls = append(calls, c) })
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
			if n := writerGoroutines(); n != before {
				t.Errorf("%d writing goroutines after Close, %d before NewWriter", n, before)
			}
			got := append(sink.data, make([]byte, int(w.End())-len(sink.data))...)
			if !bytes.Equal(got, img) {
				t.Fatal("the disk does not hold the image")
			}
			for i := 1; i < len(calls); i++ {
				if calls[i].Written < calls[i-1].Written || calls[i].Skipped < calls[i-1].Skipped {
					t.Errorf("callback %d reports %+v after %+v", i, calls[i], calls[i-1])
				}
			}
			c := w.Counts()
			if len(calls) == 0 || c != calls[len(calls)-1] {
				t.Errorf("callbacks %+v, final counts %+v", calls, c)
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
			w := NewWriter(sink, 1, known, nil)
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
	w := NewWriter(&memSink{fail: boom}, 1, false, nil)
	var err error
	for i := 0; i < 10 && err == nil; i++ {
		_, err = w.Write(make([]byte, BlockSize))
	}
	if cerr := w.Close(); !errors.Is(cerr, boom) {
		t.Fatalf("Close: %v, want %v", cerr, boom)
	}
}

// failSink is a disk that fails its nth write, and notes every write that starts once
// the writer has recorded an error.
type failSink struct {
	memSink
	w      *Writer
	n      int
	calls  atomic.Int64
	late   atomic.Int64
	failed error
}

func (s *failSink) WriteAt(p []byte, off int64) error {
	if s.w.failed() != nil {
		s.late.Add(1)
	}
	if s.calls.Add(1) == int64(s.n) {
		return s.failed
	}
	// Another write gets its chance to start while this one is in flight.
	runtime.Gosched()
	return s.memSink.WriteAt(p, off)
}

// TestWriterErrorInFlight fails one write among several in flight, first, second, in
// the middle or near the end of an image of many zero runs (several writes a block):
// Close returns that error, the writes after it do too, no write starts once it is
// recorded, and no goroutine is left.
func TestWriterErrorInFlight(t *testing.T) {
	img := image(12*BlockSize+777, 3)
	for _, n := range []int{1, 2, 17, 40} {
		for _, inFlight := range []int{2, 4} {
			t.Run(fmt.Sprintf("write %d of %d in flight", n, inFlight), func(t *testing.T) {
				boom := fmt.Errorf("write %d: disk on fire", n)
				before := writerGoroutines()
				sink := &failSink{n: n, failed: boom}
				w := NewWriter(sink, inFlight, true, nil)
				sink.w = w
				var err error
				for p := img; len(p) > 0 && err == nil; {
					k := min(len(p), 128<<10)
					_, err = w.Write(p[:k])
					p = p[k:]
				}
				if err != nil && err != boom {
					t.Errorf("Write: %v, want %v", err, boom)
				}
				if cerr := w.Close(); cerr != boom {
					t.Errorf("Close: %v, want %v", cerr, boom)
				}
				if _, err := w.Write(img[:granule]); err != boom {
					t.Errorf("a write after the error: %v, want %v", err, boom)
				}
				if late := sink.late.Load(); late != 0 {
					t.Errorf("%d writes started after the error was recorded", late)
				}
				if calls := sink.calls.Load(); calls < int64(n) {
					t.Errorf("%d writes, the failing one is %d", calls, n)
				}
				if got := writerGoroutines(); got != before {
					t.Errorf("%d writing goroutines after Close, %d before NewWriter", got, before)
				}
			})
		}
	}
}

// blockingSink holds the first write until a second one starts.
type blockingSink struct {
	memSink
	calls  atomic.Int64
	second chan struct{}
}

func (s *blockingSink) WriteAt(p []byte, off int64) error {
	switch s.calls.Add(1) {
	case 1:
		<-s.second
	case 2:
		close(s.second)
	}
	return s.memSink.WriteAt(p, off)
}

// TestWriterWritesInFlight holds the first block's write at the disk: with two blocks
// in flight the second is written meanwhile, and both land.
func TestWriterWritesInFlight(t *testing.T) {
	img := image(3*BlockSize, 9)
	sink := &blockingSink{second: make(chan struct{})}
	w := NewWriter(sink, 2, false, nil)
	if _, err := w.Write(img); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sink.data, img) {
		t.Fatal("the disk does not hold the image")
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
			w := NewWriter(sink, 1, known, nil)
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
