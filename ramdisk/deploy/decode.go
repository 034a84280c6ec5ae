package deploy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/ramdisk/disk"
	"github.com/better-compute/better-compute/ramdisk/qcow2"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// The zstd decoder's settings.
const (
	// zstdMaxWindow refuses frames that need more memory than a ramdisk should give:
	// 128 MiB covers every level and `zstd --long` up to its default of 27.
	zstdMaxWindow = 128 << 20
	// zstdConcurrency is 1: the decoder runs on the copying goroutine, which is already
	// apart from the hashing and the writing ones. Measured on a 1.2 GiB ext4 image, a
	// concurrent decoder (2 or 4) took about 10% more CPU for no faster stream.
	zstdConcurrency = 1
)

// errTooLarge marks an image that does not fit on the disk.
var errTooLarge = errors.New("the image is larger than the disk")

// decode decompresses the artifact and lays its format out on the disk, returning the
// disk image's length, and refuses an image longer than capacity bytes (the target's:
// none, -1, for a file) before any byte of it past them is written. It stops at ctx's end: a MiB of zstd decodes to 32 GiB of zeros,
// which a disk that reads zeros skips, so the decoder may be busy for seconds with what
// was read ahead of a deadline and never read the network that would notice it.
func (w *writing) decode(ctx context.Context, src io.Reader, out *disk.Writer, capacity int64) (int64, error) {
	var r io.Reader
	switch w.in.Compression {
	case proto.CompressionZstd:
		d, err := newZstdReader(src, cmp.Or(w.opts.ZstdConcurrency, zstdConcurrency))
		if err != nil {
			return 0, err
		}
		defer d.Close()
		r = d
	case proto.CompressionGzip:
		g, err := gzip.NewReader(src)
		if err != nil {
			return 0, err
		}
		defer g.Close()
		r = g
	default:
		r = src
	}
	if w.in.Format == proto.FormatQcow2 {
		s := &qcowSink{ctx: ctx, out: out, capacity: capacity}
		h, err := qcow2.Convert(r, s, qcow2.Limits{})
		return int64(h.Size), err
	}
	if _, err := io.Copy(bounded{ctx, out, capacity}, r); err != nil {
		return 0, err
	}
	if capacity >= 0 && out.End() > capacity {
		return 0, fmt.Errorf("%w: %d bytes for %d", errTooLarge, out.End(), capacity)
	}
	return out.End(), nil
}

// bounded appends to a raw image and refuses the write that would take it past the
// disk's end (capacity; none for a file), before anything of it is kept. The decoded
// stream is bounded by nothing else before its digest is known at its end: a few bytes
// of zstd or gzip decode to gigabytes of zeros, which a disk that reads zeros never
// takes, so a stream that expands without end would be decoded until the step's time ran
// out. It stops at ctx's end too.
type bounded struct {
	ctx      context.Context
	out      *disk.Writer
	capacity int64
}

func (b bounded) Write(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	if b.capacity >= 0 && b.out.End()+int64(len(p)) > b.capacity {
		return 0, fmt.Errorf("%w: more than %d bytes", errTooLarge, b.capacity)
	}
	return b.out.Write(p)
}

// newZstdReader is the zstd decoder deploy.image streams through, given src with its
// RLE blocks as raw ones (rleAsRaw).
func newZstdReader(src io.Reader, concurrency int) (*zstd.Decoder, error) {
	return zstd.NewReader(&rleAsRaw{src: src}, zstd.WithDecoderConcurrency(concurrency),
		// The frames' own checksums (xxhash64 of the output, about 5% of the CPU) are
		// checked as zstd -d checks them: an artifact broken before it was digested and
		// signed is refused (IMAGE_CORRUPT), not written.
		zstd.WithDecoderLowmem(false), zstd.WithDecoderMaxWindow(zstdMaxWindow))
}

// qcowSink lays a qcow2 image's guest disk onto the writer, until ctx's end.
type qcowSink struct {
	ctx      context.Context
	out      *disk.Writer
	capacity int64
}

func (s *qcowSink) Begin(size int64) error {
	if s.capacity >= 0 && size > s.capacity {
		return fmt.Errorf("%w: a guest disk of %d bytes for %d", errTooLarge, size, s.capacity)
	}
	return nil
}

func (s *qcowSink) WriteAt(p []byte, off int64) error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	return s.out.WriteAt(p, off)
}

func (s *qcowSink) Zero(off, n int64) error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	return s.out.Zero(off, n)
}
