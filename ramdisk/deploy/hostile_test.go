package deploy

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// endless serves head, then body over and over until the client goes away, with no
// length: a cache or source that never ends its artifact.
func endless(t *testing.T, head, body []byte) string {
	t.Helper()
	chunk := bytes.Repeat(body, max(1, (256<<10)/len(body)))
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(head)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(s.Close)
	return s.URL + "/img.zst"
}

// zstdZeros is the start of a zstd frame of no declared size and a 128 KiB window, and
// one RLE block of 128 KiB of zeros not its last: the frame goes on as long as blocks
// come, 32 Ki times the bytes it takes.
var zstdZeros = struct{ head, block []byte }{
	head:  []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38},
	block: []byte{0x02, 0x00, 0x10, 0x00},
}

// TestImageExpandingPastTheDisk: an artifact whose zstd stream expands to zeros without
// end (the cache's or the source's, hostile, the digest known only at the end), onto a
// disk that reads zeros after its offload, where no zero reaches the disk. The deploy
// stops once the image is larger than the disk, DRIVER_ERROR disk-write, the disk wiped.
// Before, zeros were decoded and skipped for as long as they came, past the disk's end:
// until the step's time ran out.
func TestImageExpandingPastTheDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a block device target needs root")
	}
	target := loopTarget(t, 8<<20, true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := Image(ctx, Input{CacheURL: endless(t, zstdZeros.head, zstdZeros.block), Digest: digest(nil),
		Format: proto.FormatRaw, Compression: proto.CompressionZstd, Target: target}, fast)
	if e := proto.AsError(err); e.Code != proto.DriverError || e.Details.Reason != proto.ReasonDiskWrite {
		t.Fatalf("Image after %v: %v, want DRIVER_ERROR disk-write", time.Since(start).Round(time.Millisecond), err)
	}
	got, _ := os.ReadFile(target)
	checkWiped(t, got)
}

// TestImageLongerThanItsSize: an artifact the catalog says is n bytes, served without a
// length and without end (zstd skippable frames, which decode to nothing, so neither the
// disk nor the decoder stops it). The stream is cut past the catalog's size: the
// location failed, digest-mismatch, the disk wiped. Before, it was read and hashed for as
// long as it came: until the step's time ran out.
func TestImageLongerThanItsSize(t *testing.T) {
	frame := make([]byte, 8+64<<10)
	binary.LittleEndian.PutUint32(frame, 0x184d2a50)
	binary.LittleEndian.PutUint32(frame[4:], 64<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	target := emptyDisk(t)
	start := time.Now()
	_, err := Image(ctx, Input{CacheURL: endless(t, nil, frame), Digest: digest(nil), SizeBytes: 1 << 20,
		Format: proto.FormatRaw, Compression: proto.CompressionZstd, Target: target}, fast)
	if e := proto.AsError(err); e.Code != proto.DriverError || e.Details.Reason != proto.ReasonDigestMismatch {
		t.Fatalf("Image after %v: %v, want DRIVER_ERROR digest-mismatch", time.Since(start).Round(time.Millisecond), err)
	}
}

// TestImageOfNoSizeEndlessOnADisk: an artifact of no catalog size (sizeBytes 0), served
// without a length and without end as zstd skippable frames, which decode to nothing, so
// that neither the decoder nor the disk's end stops it. An artifact far larger than the
// disk holds no image that fits: the deploy stops there, DRIVER_ERROR disk-write, the disk
// wiped. Before, it was read and hashed for as long as it came: until the step's time ran
// out.
func TestImageOfNoSizeEndlessOnADisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a block device target needs root")
	}
	frame := make([]byte, 8+64<<10)
	binary.LittleEndian.PutUint32(frame, 0x184d2a50)
	binary.LittleEndian.PutUint32(frame[4:], 64<<10)
	target := loopTarget(t, 8<<20, true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := Image(ctx, Input{CacheURL: endless(t, nil, frame), Digest: digest(nil),
		Format: proto.FormatRaw, Compression: proto.CompressionZstd, Target: target}, fast)
	if e := proto.AsError(err); e.Code != proto.DriverError || e.Details.Reason != proto.ReasonDiskWrite {
		t.Fatalf("Image after %v: %v, want DRIVER_ERROR disk-write", time.Since(start).Round(time.Millisecond), err)
	}
	got, _ := os.ReadFile(target)
	checkWiped(t, got)
}

// TestImageStopsAtItsDeadline: a zstd stream of zero blocks without end onto a disk that
// reads zeros and has no end short of it (a file here; a disk of some TiB that offloads
// its zeroing is the same), so that the decoder, not the network, is busy: each MiB of
// the artifact read ahead decodes to 32 GiB of skipped zeros. The deploy ends TIMEOUT
// within a moment of its deadline. Before, the decoder went on through what was read
// ahead after the deadline, the body aborted only once it returned.
func TestImageStopsAtItsDeadline(t *testing.T) {
	target := emptyDisk(t)
	const deadline, late = 2 * time.Second, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	_, err := Image(ctx, Input{CacheURL: endless(t, zstdZeros.head, zstdZeros.block), Digest: digest(nil),
		Format: proto.FormatRaw, Compression: proto.CompressionZstd, Target: target}, fast)
	took := time.Since(start)
	if proto.CodeOf(err) != proto.Timeout {
		t.Fatalf("Image after %v: %v, want TIMEOUT", took.Round(time.Millisecond), err)
	}
	if took > deadline+late {
		t.Fatalf("Image returned %v after its deadline of %v: %v", (took - deadline).Round(time.Millisecond), deadline, err)
	}
}
