package deploy

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
)

// rleAsRaw passes a zstd stream to the decoder with each RLE block (one byte, repeated
// up to 128 KiB times: an ext4 image's zero runs arrive as such blocks) rewritten as a
// raw block of the same bytes. The Go decoder fills an RLE block one byte at a time,
// about 17% of the decoding goroutine's time on a 2 GiB image of /usr files, where it
// copies a raw block's bytes as memory moves; the bytes written here are cleared or
// copied the same way. The decoded output is the same, byte for byte: the two blocks
// have the same size limits (the window, 128 KiB), and the frames' checksums and sizes
// are of the output. Frame and block headers are read as the zstd format (RFC 8878)
// lays them out and passed on as they are; anything else (a magic number it does not
// know, a reserved block type, the input ending early) is passed on untouched, for the
// decoder to refuse. It never refuses anything itself: errors are the source's.
type rleAsRaw struct {
	src io.Reader
	// head holds header bytes read and not yet passed on, head[off:n].
	head   [maxFrameHeader]byte
	off, n int
	// pass is the bytes of the source to pass on as they are; repeat the bytes of an RLE
	// block to write, each of them value (fill holds value repeated, when not zero).
	pass   int64
	repeat int
	value  byte
	fill   []byte
	// state is what the next header is; checksum whether the frame ends with one.
	state    int
	checksum bool
	err      error
}

const (
	// maxFrameHeader is the longest frame header: magic 4, descriptor 1, window 1,
	// dictionary id 4, content size 8.
	maxFrameHeader = 18
	frameMagic     = 0xFD2FB528
	// A skippable frame's magic is 0x184D2A5? and its size follows.
	skippableMask, skippableMagic = 0xFFFFFFF0, 0x184D2A50
	// The block types it tells apart (raw is 0, compressed 2).
	blockRLE, blockReserved = 1, 3
	maxBlock                = 128 << 10
	// untilEnd passes on the rest of the source.
	untilEnd = math.MaxInt64
)

// What rleAsRaw reads next.
const (
	atFrame    = iota // a frame's magic
	atBlock           // a block header
	atFrameEnd        // after a frame's last block: its checksum if it has one
	passing           // nothing it knows: the rest of the source as it is
)

func (r *rleAsRaw) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		switch {
		case r.off < r.n:
			n := copy(p, r.head[r.off:r.n])
			r.off += n
			return n, nil
		case r.pass > 0:
			n, err := r.src.Read(p[:min(int64(len(p)), r.pass)])
			r.pass -= int64(n)
			if n > 0 || err != nil {
				return n, err
			}
		case r.repeat > 0:
			n := min(len(p), r.repeat)
			if r.value == 0 {
				clear(p[:n])
			} else {
				n = copy(p[:n], r.fill)
			}
			r.repeat -= n
			return n, nil
		case r.err != nil:
			return 0, r.err
		default:
			r.err = r.next()
		}
	}
}

// read reads n more header bytes into head, true when all came. A source that ended
// early leaves what it gave to be passed on, and the rest of it (nothing) passes.
func (r *rleAsRaw) read(n int) (bool, error) {
	m, err := io.ReadFull(r.src, r.head[r.n:r.n+n])
	r.n += m
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		r.state, r.pass = passing, untilEnd
		return false, nil
	}
	return err == nil, err
}

// next reads the next header into head and sets what follows it.
func (r *rleAsRaw) next() error {
	r.off, r.n = 0, 0
	switch r.state {
	case atFrame:
		if ok, err := r.read(4); !ok {
			return err
		}
		switch magic := binary.LittleEndian.Uint32(r.head[:4]); {
		case magic == frameMagic:
			if ok, err := r.read(1); !ok {
				return err
			}
			if ok, err := r.read(frameHeaderRest(r.head[4])); !ok {
				return err
			}
			r.state, r.checksum = atBlock, r.head[4]&0x04 != 0
		case magic&skippableMask == skippableMagic:
			if ok, err := r.read(4); !ok {
				return err
			}
			r.pass = int64(binary.LittleEndian.Uint32(r.head[4:8]))
		default:
			r.state, r.pass = passing, untilEnd
		}
	case atBlock:
		if ok, err := r.read(3); !ok {
			return err
		}
		h := uint32(r.head[0]) | uint32(r.head[1])<<8 | uint32(r.head[2])<<16
		size := int(h >> 3)
		if h&1 != 0 {
			r.state = atFrameEnd
		}
		switch (h >> 1) & 3 {
		case blockRLE:
			var b [1]byte
			if _, err := io.ReadFull(r.src, b[:]); err != nil {
				// Passed on as it came, for the decoder to refuse.
				r.state, r.pass = passing, untilEnd
				return nil
			}
			r.head[0] &^= 0x06 // the block type's bits: raw
			r.repeat, r.value = size, b[0]
			r.fillWith(b[0])
		case blockReserved:
			r.state, r.pass = passing, untilEnd
		default:
			r.pass = int64(size)
		}
	case atFrameEnd:
		r.state = atFrame
		if r.checksum {
			r.pass = 4
		}
	default: // passing: the source's end, or its error, comes through Read
		r.pass = untilEnd
	}
	return nil
}

// fillWith makes fill hold value maxBlock times (a block's most); zero needs none.
func (r *rleAsRaw) fillWith(value byte) {
	if value == 0 || (r.fill != nil && r.fill[0] == value) {
		return
	}
	if r.fill == nil {
		r.fill = make([]byte, maxBlock)
	}
	r.fill[0] = value
	for i := 1; i < len(r.fill); i *= 2 {
		copy(r.fill[i:], r.fill[:i])
	}
}

// frameHeaderRest is the length of a frame header after its descriptor byte fhd: the
// window descriptor unless the frame is a single segment, the dictionary id (0, 1, 2
// or 4 bytes), and the content size (0 or 1 when single segment, 2, 4 or 8).
func frameHeaderRest(fhd byte) int {
	single := fhd&0x20 != 0
	n := [4]int{0, 1, 2, 4}[fhd&3]
	if !single {
		n++
	}
	switch fhd >> 6 {
	case 0:
		if single {
			n++
		}
	case 1:
		n += 2
	case 2:
		n += 4
	case 3:
		n += 8
	}
	return n
}
