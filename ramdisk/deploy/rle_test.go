package deploy

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"testing/iotest"

	"github.com/klauspost/compress/zstd"
)

// rleSample is data of the kinds an image holds: runs of zeros (an ext4 image's free
// blocks), a run of one other byte, and bytes that do not compress.
func rleSample(t testing.TB) []byte {
	t.Helper()
	rnd := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 300<<10)
	for i := range noise {
		noise[i] = byte(rnd.Uint32())
	}
	var b bytes.Buffer
	b.Write(make([]byte, 1<<20))
	b.Write(noise)
	b.Write(bytes.Repeat([]byte{0xAB}, 500<<10))
	b.Write(bytes.Repeat([]byte("the quick brown fox "), 20000))
	b.Write(make([]byte, 700<<10+13))
	return b.Bytes()
}

// zstdStream is a compressed stream and the bytes it holds.
type zstdStream struct{ art, data []byte }

// zstdStreams compresses data as the zstd tool does with several settings, and as
// streams of several frames: what an operator's image artifact can be. Each is named.
func zstdStreams(t testing.TB, data []byte) map[string]zstdStream {
	t.Helper()
	if _, err := exec.LookPath("zstd"); err != nil {
		t.Skip("zstd is not installed (.ci/deps.sh)")
	}
	tool := func(in []byte, args ...string) []byte {
		cmd := exec.Command("zstd", append([]string{"-q", "-c"}, args...)...)
		cmd.Stdin = bytes.NewReader(in)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("zstd %v: %v", args, err)
		}
		return out
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "image.raw")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// Of a file, the tool writes the content's size in the frame header.
	ofFile, err := exec.Command("zstd", "-q", "-c", "-3", file).Output()
	if err != nil {
		t.Fatal(err)
	}
	skippable := binary.LittleEndian.AppendUint32(nil, skippableMagic|7)
	skippable = binary.LittleEndian.AppendUint32(skippable, 5)
	skippable = append(skippable, "hello"...)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		t.Fatal(err)
	}
	small := data[:200<<10] // all zeros: a single segment frame of RLE blocks
	return map[string]zstdStream{
		"zstd -3":                      {tool(data, "-3"), data},
		"zstd -3 of a file":            {ofFile, data},
		"zstd -19 --no-check":          {tool(data, "-19", "--no-check"), data},
		"zstd -1 --long=27":            {tool(data, "-1", "--long=27"), data},
		"zstd -3 of 200 KiB of a file": {enc.EncodeAll(small, nil), small},
		"a skippable frame, then two frames": {bytes.Join([][]byte{skippable, ofFile, tool(data, "-19", "--no-check")}, nil),
			bytes.Join([][]byte{data, data}, nil)},
		"the Go encoder": {enc.EncodeAll(data, nil), data},
	}
}

// decodeZstd decodes art with the Go decoder as deploy.image sets it up, without the
// rewrite of RLE blocks.
func decodeZstd(art io.Reader) ([]byte, error) {
	d, err := plainZstd(art)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return io.ReadAll(d)
}

// plainZstd is the Go decoder of art as deploy.image sets it up, reading art as it is.
func plainZstd(art io.Reader) (*zstd.Decoder, error) {
	return zstd.NewReader(art, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(false),
		zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(256<<20))
}

// TestRLEAsRawDecodesTheSame: streams the zstd tool and the Go encoder write, their RLE
// blocks rewritten as raw ones, decode to the same bytes, read in any pieces; and the
// rewrite happened (the stream grew by the RLE blocks' bytes).
func TestRLEAsRawDecodesTheSame(t *testing.T) {
	for name, z := range zstdStreams(t, rleSample(t)) {
		t.Run(name, func(t *testing.T) {
			rewritten, err := io.ReadAll(&rleAsRaw{src: bytes.NewReader(z.art)})
			if err != nil {
				t.Fatal(err)
			}
			if len(rewritten) < len(z.art)+64<<10 {
				t.Errorf("the rewritten stream has %d bytes for %d: its RLE blocks were not rewritten", len(rewritten), len(z.art))
			}
			// An io.Reader as the standard library's tests want one: reads of any size,
			// an empty one included.
			if err := iotest.TestReader(&rleAsRaw{src: bytes.NewReader(z.art)}, rewritten); err != nil {
				t.Error(err)
			}
			for how, src := range map[string]io.Reader{
				"the rewritten stream":  bytes.NewReader(rewritten),
				"a byte at a time":      &rleAsRaw{src: iotest.OneByteReader(bytes.NewReader(z.art))},
				"half of each read":     &rleAsRaw{src: iotest.HalfReader(bytes.NewReader(z.art))},
				"the last read's error": &rleAsRaw{src: iotest.DataErrReader(bytes.NewReader(z.art))},
			} {
				if got, err := decodeZstd(src); err != nil || !bytes.Equal(got, z.data) {
					t.Errorf("%s: decoded %d bytes (%v), not the %d compressed", how, len(got), err, len(z.data))
				}
			}
		})
	}
}

// TestRLEAsRawEmptyRead: an empty read returns at once wherever the stream is, in the
// middle of bytes passed on as they came among them (before, it waited for ever there).
func TestRLEAsRawEmptyRead(t *testing.T) {
	z := zstdStreams(t, rleSample(t))["a skippable frame, then two frames"]
	r := &rleAsRaw{src: bytes.NewReader(z.art)}
	for _, n := range []int{8, 1, 12, 1, 3} { // the skippable frame's head, into its 5 bytes, then on
		if _, err := io.ReadFull(r, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		if n, err := r.Read(nil); n != 0 || err != nil {
			t.Fatalf("an empty read: %d, %v", n, err)
		}
	}
}

// TestRLEAsRawPassesBrokenStreamsOn: a stream cut anywhere, or with a byte changed,
// decodes rewritten exactly as it does as it came: the same bytes, or an error both
// ways. The rewrite never makes the decoder take what it would refuse.
func TestRLEAsRawPassesBrokenStreamsOn(t *testing.T) {
	art := zstdStreams(t, rleSample(t))["zstd -3 of a file"].art
	for _, cut := range []int{0, 1, 3, 4, 5, 9, 10, 11, 12, 13, 14, 100, len(art) / 2, len(art) - 5, len(art) - 4, len(art) - 1} {
		sameDecoding(t, art[:cut])
	}
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		broken := bytes.Clone(art)
		broken[rnd.IntN(64)] ^= byte(1 + rnd.IntN(255))
		sameDecoding(t, broken)
	}
}

// sameDecoding checks that art decodes as it is and rewritten alike (rleAsRaw).
func sameDecoding(t *testing.T, art []byte) {
	t.Helper()
	plain, perr := decodeZstd(bytes.NewReader(art))
	rewritten, rerr := decodeZstd(&rleAsRaw{src: bytes.NewReader(art)})
	if (perr == nil) != (rerr == nil) || (perr == nil && !bytes.Equal(plain, rewritten)) {
		t.Fatalf("a stream of %d bytes decodes to %d bytes (%v) as it is, %d (%v) rewritten", len(art), len(plain), perr, len(rewritten), rerr)
	}
}

// FuzzRLEAsRaw: whatever the bytes, the rewrite never panics, and the decoder takes a
// stream rewritten exactly when it takes it as it is, with the same output.
func FuzzRLEAsRaw(f *testing.F) {
	for _, z := range zstdStreams(f, rleSample(f)) {
		f.Add(z.art[:min(len(z.art), 4096)])
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(enc.EncodeAll(make([]byte, 300<<10), nil))
	f.Add(enc.EncodeAll(bytes.Repeat([]byte{7}, 200<<10), nil))
	f.Fuzz(func(t *testing.T, art []byte) {
		sameDecoding(t, art)
	})
}
