package deploy

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/ramdisk/disk"
)

// maxFuzzDisk bounds the disk FuzzDecodeImage writes onto.
const maxFuzzDisk = 8 << 20

// standardDecoding is what the standard decoder makes of a raw image's artifact: the
// standard library's gzip, or zstd's own Decoder reading the stream as it came (no RLE
// block rewritten). It reads at most limit+1 bytes of the image, so that one longer than
// a disk of limit bytes shows as such without being held whole.
func standardDecoding(c proto.Compression, art []byte, limit int64) ([]byte, error) {
	var r io.Reader
	switch c {
	case proto.CompressionGzip:
		g, err := gzip.NewReader(bytes.NewReader(art))
		if err != nil {
			return nil, err
		}
		r = g
	default:
		d, err := plainZstd(bytes.NewReader(art))
		if err != nil {
			return nil, err
		}
		defer d.Close()
		r = d
	}
	return io.ReadAll(io.LimitReader(r, limit+1))
}

// decodeOnto runs deploy.image's decode-and-write path over art, a raw image compressed
// with c, onto the file at path standing for a disk of capacity bytes, as attempt runs
// it: the target reset, the decoder's image written through disk.Writer, the target
// finished at the image's length. It returns the decode's error.
func decodeOnto(t *testing.T, path string, c proto.Compression, art []byte, capacity int64) error {
	t.Helper()
	target, err := disk.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	zeroesKnown, err := target.Reset(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := disk.NewWriter(target, zeroesKnown, nil)
	w := &writing{in: Input{Format: proto.FormatRaw, Compression: c}, target: target}
	length, derr := w.decode(context.Background(), bytes.NewReader(art), out, capacity)
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() > capacity {
		t.Fatalf("the disk of %d bytes holds %d (%v): written past its end", capacity, st.Size(), err)
	}
	if derr == nil {
		if err := target.Finish(length); err != nil {
			t.Fatal(err)
		}
	}
	return derr
}

// FuzzDecodeImage streams any artifact, gzip or zstd, through deploy.image's decoder and
// writer onto a file standing for a disk of up to 8 MiB. Either it is refused, or the
// disk holds exactly what the standard decoder makes of it; refused as larger than the
// disk only when the standard decoder makes more than the disk holds of it, and
// refused otherwise only when the standard decoder refuses it too. Nothing is written
// past the disk's end.
func FuzzDecodeImage(f *testing.F) {
	raw := diskImage(64<<10, 7)
	for _, c := range []proto.Compression{proto.CompressionGzip, proto.CompressionZstd} {
		art := compress(f, raw, c)
		f.Add(c == proto.CompressionZstd, uint32(len(raw)), art)
		f.Add(c == proto.CompressionZstd, uint32(len(raw)-1), art)
		f.Add(c == proto.CompressionZstd, uint32(len(raw)), bytes.Join([][]byte{art, compress(f, raw[:4096], c)}, nil))
		f.Add(c == proto.CompressionZstd, uint32(len(raw)), art[:len(art)/2])
	}
	f.Add(true, uint32(1<<20), append(bytes.Clone(zstdZeros.head), bytes.Repeat(zstdZeros.block, 12)...))
	f.Add(false, uint32(1<<20), []byte("not gzip"))
	path := filepath.Join(f.TempDir(), "disk")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, zstd bool, size uint32, art []byte) {
		c, capacity := proto.CompressionGzip, int64(size%(maxFuzzDisk+1))
		if zstd {
			c = proto.CompressionZstd
		}
		err := decodeOnto(t, path, c, art, capacity)
		want, werr := standardDecoding(c, art, capacity)
		fits := werr == nil && int64(len(want)) <= capacity
		switch {
		case err == nil && !fits:
			t.Fatalf("decoded onto a disk of %d bytes; the standard decoder makes %d bytes (%v)", capacity, len(want), werr)
		case err == nil:
			got, rerr := os.ReadFile(path)
			if rerr != nil || !bytes.Equal(got, want) {
				t.Fatalf("the disk holds %d bytes (%v), not the %d the standard decoder makes", len(got), rerr, len(want))
			}
		case errors.Is(err, errTooLarge) && int64(len(want)) <= capacity:
			t.Fatalf("refused as larger than the disk of %d bytes: %v; the standard decoder makes %d bytes (%v)", capacity, err, len(want), werr)
		case !errors.Is(err, errTooLarge) && fits:
			t.Fatalf("refused: %v; the standard decoder makes %d bytes of it, which fit a disk of %d", err, len(want), capacity)
		}
	})
}
