package disk

import (
	"bytes"
	"sync"
	"unsafe"
)

// Sink is where a Writer's blocks land: a Target, or a recorder in tests.
type Sink interface {
	WriteAt(p []byte, off int64) error
}

// The writer's geometry.
const (
	// BlockSize is the size of one write handed to the disk: large, and aligned to
	// itself when the image is written in order.
	BlockSize = 4 * MiB
	// granule is the unit zero detection works in: a page, and the block size of the
	// file systems a test target lives on.
	granule = 4096
	// minSkip is the shortest run of zero granules worth a gap between two writes.
	minSkip = 16 * granule
	// blocks is how many blocks exist: one filling, one being written, one spare.
	blocks = 3
)

// Counts says what a Writer has done so far.
type Counts struct {
	// Written is the bytes handed to the disk.
	Written int64
	// Skipped is the bytes of zeros not written because the disk reads zeros there.
	Skipped int64
}

// Writer gathers an image's bytes into large blocks and writes each one on a goroutine
// of its own, so that decoding goes on while the disk takes the previous block. Where
// the disk is known to read back zeros, runs of zero pages are skipped instead of
// written, and a write that is all zeros (a zstd frame's zero block, decoded) is left
// out before it is copied into a block. Memory is bounded by three blocks.
//
// Write, WriteAt and Zero are called from one goroutine; the callback from another.
type Writer struct {
	sink        Sink
	zeroesKnown bool
	onFlush     func(Counts)

	cur    *block
	zeros  []byte // a block of zeros for Zero, made on first use
	cursor int64
	end    int64
	free   chan *block
	full   chan *block
	done   chan struct{}

	mu     sync.Mutex
	counts Counts
	err    error
}

type block struct {
	off int64
	buf []byte
}

// NewWriter starts a writer onto sink. onFlush, if not nil, is called after every block
// with the counts so far.
func NewWriter(sink Sink, zeroesKnown bool, onFlush func(Counts)) *Writer {
	w := &Writer{sink: sink, zeroesKnown: zeroesKnown, onFlush: onFlush,
		free: make(chan *block, blocks), full: make(chan *block, blocks), done: make(chan struct{})}
	for range blocks {
		w.free <- &block{buf: pageAligned(BlockSize)}
	}
	go w.run()
	return w
}

// pageAligned is an empty slice of capacity n whose memory starts at a page boundary,
// so that a block written at an aligned offset may go to the disk directly.
func pageAligned(n int) []byte {
	b := make([]byte, n+granule)
	skip := (granule - int(uintptr(unsafe.Pointer(&b[0]))%granule)) % granule
	return b[skip : skip : skip+n]
}

func (w *Writer) run() {
	defer close(w.done)
	for b := range w.full {
		if w.failed() == nil {
			w.flush(b)
		}
		b.buf = b.buf[:0]
		w.free <- b
	}
}

func (w *Writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// flush writes one block, leaving out runs of zero granules when zeros are known.
func (w *Writer) flush(b *block) {
	var written, skipped int64
	err := w.spans(b, func(p []byte, off int64, zero bool) error {
		if zero {
			skipped += int64(len(p))
			return nil
		}
		written += int64(len(p))
		return w.sink.WriteAt(p, off)
	})
	w.mu.Lock()
	w.counts.Written += written
	w.counts.Skipped += skipped
	if err != nil && w.err == nil {
		w.err = err
	}
	c := w.counts
	w.mu.Unlock()
	if err == nil && w.onFlush != nil {
		w.onFlush(c)
	}
}

// spans cuts a block into alternating data and zero spans (zero spans only when the
// disk reads zeros, and only runs of at least minSkip), calling fn for each in order.
func (w *Writer) spans(b *block, fn func(p []byte, off int64, zero bool) error) error {
	if !w.zeroesKnown {
		return fn(b.buf, b.off, false)
	}
	start, i := 0, 0
	for i < len(b.buf) {
		// Granules are aligned to the disk, not to the block.
		g := min(len(b.buf), i+granule-int((b.off+int64(i))%granule))
		if !isZero(b.buf[i:g]) {
			i = g
			continue
		}
		j := g
		for j < len(b.buf) {
			k := min(len(b.buf), j+granule)
			if !isZero(b.buf[j:k]) {
				break
			}
			j = k
		}
		if j-i >= minSkip || (i == 0 && j == len(b.buf)) {
			if i > start {
				if err := fn(b.buf[start:i], b.off+int64(start), false); err != nil {
					return err
				}
			}
			if err := fn(b.buf[i:j], b.off+int64(i), true); err != nil {
				return err
			}
			start = j
		}
		i = j
	}
	if start < len(b.buf) {
		return fn(b.buf[start:], b.off+int64(start), false)
	}
	return nil
}

var zeroPage [granule]byte

func isZero(p []byte) bool {
	for len(p) >= granule {
		if !bytes.Equal(p[:granule], zeroPage[:]) {
			return false
		}
		p = p[granule:]
	}
	return bytes.Equal(p, zeroPage[:len(p)])
}

// Write appends p to the image at the cursor.
func (w *Writer) Write(p []byte) (int, error) {
	if err := w.WriteAt(p, w.cursor); err != nil {
		return 0, err
	}
	return len(p), nil
}

// WriteAt writes p at off. Writes that continue the previous one share its block.
func (w *Writer) WriteAt(p []byte, off int64) error {
	if err := w.failed(); err != nil {
		return err
	}
	w.cursor = off + int64(len(p))
	w.end = max(w.end, w.cursor)
	if i, j := w.zeroMiddle(p, off); j > i {
		w.buffer(p[:i], off)
		w.skip(int64(j - i))
		p, off = p[j:], off+int64(j)
	}
	w.buffer(p, off)
	return nil
}

// zeroMiddle is the run of whole granules in p, to be written at off, that Write may
// leave out without copying it: [i, j) when they are all zero, the disk reads zeros and
// the run is long enough to be skipped; i == j otherwise. A decoder hands a zstd frame's
// zero blocks over whole, so most zero runs never reach a block or its scan.
func (w *Writer) zeroMiddle(p []byte, off int64) (i, j int) {
	if !w.zeroesKnown || len(p) < minSkip {
		return 0, 0
	}
	i = int((granule - off%granule) % granule)
	j = i + (len(p)-i)/granule*granule
	if j-i < minSkip || !isZero(p[i:j]) {
		return 0, 0
	}
	return i, j
}

// skip counts n bytes of zeros left out.
func (w *Writer) skip(n int64) {
	w.mu.Lock()
	w.counts.Skipped += n
	w.mu.Unlock()
}

// buffer copies p, to be written at off, into blocks, handing each full one to the
// writing goroutine.
func (w *Writer) buffer(p []byte, off int64) {
	for len(p) > 0 {
		if w.cur != nil && (off != w.cur.off+int64(len(w.cur.buf)) || len(w.cur.buf) == cap(w.cur.buf)) {
			w.submit()
		}
		if w.cur == nil {
			w.cur = <-w.free
			w.cur.off = off
		}
		n := min(len(p), cap(w.cur.buf)-len(w.cur.buf))
		w.cur.buf = append(w.cur.buf, p[:n]...)
		p = p[n:]
		off += int64(n)
	}
}

// Zero makes [off, off+n) of the image read as zeros: nothing to do where the disk
// reads zeros, zeros written otherwise.
func (w *Writer) Zero(off, n int64) error {
	if w.zeroesKnown {
		w.end = max(w.end, off+n)
		w.skip(n)
		return nil
	}
	if w.zeros == nil {
		w.zeros = make([]byte, BlockSize)
	}
	for n > 0 {
		c := min(n, int64(len(w.zeros)))
		if err := w.WriteAt(w.zeros[:c], off); err != nil {
			return err
		}
		off += c
		n -= c
	}
	return nil
}

func (w *Writer) submit() {
	w.full <- w.cur
	w.cur = nil
}

// Close writes what is buffered, waits for the disk, and returns the first error.
func (w *Writer) Close() error {
	if w.cur != nil {
		w.submit()
	}
	close(w.full)
	<-w.done
	return w.failed()
}

// End is one past the last byte written or zeroed: the image's length so far.
func (w *Writer) End() int64 { return w.end }

// Counts returns the counts so far.
func (w *Writer) Counts() Counts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts
}
