package disk

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// loopDevice attaches a loop device with sectors of sector bytes over a new sparse file
// of size bytes, marked non-rotational when solid, and returns the device's and the
// file's paths; it skips the test where loop devices cannot be made.
func loopDevice(t *testing.T, size int64, sector int, solid bool) (dev, backing string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	backing = filepath.Join(t.TempDir(), "backing")
	if err := os.WriteFile(backing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(backing, size); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", "--sector-size", strconv.Itoa(sector), backing).CombinedOutput()
	if err != nil {
		t.Skipf("losetup: %v: %s", err, out)
	}
	dev = strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	if solid {
		rot := filepath.Join("/sys/block", filepath.Base(dev), "queue", "rotational")
		if err := os.WriteFile(rot, []byte("0"), 0); err != nil {
			t.Fatal(err)
		}
	}
	return dev, backing
}

// TestDirectWrites writes an image onto a block device through a Writer, as deploy.image
// does: every aligned byte goes around the page cache, the unaligned tail through it,
// zero runs that cross the writer's blocks are skipped or written, and the device's
// backing file ends up holding the image.
func TestDirectWrites(t *testing.T) {
	img := image(3*BlockSize+12345, 11)
	clear(img[BlockSize-100*1024 : BlockSize+300*1024])
	copy(img[2*BlockSize-3:], "data across a block boundary")
	img[len(img)-1] = 0xff // the unaligned tail is written, not skipped
	for name, solid := range map[string]bool{"zeros known": true, "zeros unknown": false} {
		t.Run(name, func(t *testing.T) {
			dev, backing := loopDevice(t, 16*MiB, 512, solid)
			target, err := Open(dev)
			if err != nil {
				t.Fatal(err)
			}
			defer target.Close()
			if target.direct == nil || target.align != granule {
				t.Fatalf("direct writes: %v, alignment %d", target.direct != nil, target.align)
			}
			known, err := target.Reset(context.Background())
			if err != nil || known != solid {
				t.Fatalf("Reset: %v, %v", known, err)
			}
			w := NewWriter(target, known, nil)
			for p := img; len(p) > 0; {
				n := min(len(p), 100003)
				if _, err := w.Write(p[:n]); err != nil {
					t.Fatal(err)
				}
				p = p[n:]
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if err := target.Finish(int64(len(img))); err != nil {
				t.Fatal(err)
			}
			c := w.Counts()
			if (c.Skipped > 0) != known || c.Written+c.Skipped != int64(len(img)) {
				t.Errorf("written %d, skipped %d of %d", c.Written, c.Skipped, len(img))
			}
			if tail := c.Written - target.directBytes; tail != int64(len(img)%granule) {
				t.Errorf("%d bytes went through the page cache, want only the unaligned tail of %d", tail, len(img)%granule)
			}
			checkHolds(t, backing, img, 0)
		})
	}
}

// checkHolds fails unless path holds want at off and zeros everywhere else.
func checkHolds(t *testing.T, path string, want []byte, off int) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	expect := make([]byte, len(got))
	copy(expect[off:], want)
	if !bytes.Equal(got, expect) {
		i := 0
		for i < len(got) && got[i] == expect[i] {
			i++
		}
		t.Fatalf("%s differs from the image from byte %d on", path, i)
	}
}

// TestDirectSpan cuts writes into an aligned middle that may bypass the page cache and
// unaligned ends that may not.
func TestDirectSpan(t *testing.T) {
	mem := pageAligned(4 * granule)[:4*granule]
	cases := map[string]struct {
		p         []byte
		off       int64
		head, mid int
	}{
		"aligned":                      {mem, 8 * granule, 0, 4 * granule},
		"unaligned tail":               {mem[:3*granule+57], 0, 0, 3 * granule},
		"unaligned head and tail":      {mem[granule-100 : 3*granule+1], 2*granule - 100, 100, 2 * granule},
		"memory off by one":            {mem[1:], 0, 0, 0},
		"memory and offset apart":      {mem[100:], 8 * granule, 0, 0},
		"shorter than an aligned page": {mem[granule-100 : 2*granule-1], granule - 100, 0, 0},
		"nothing":                      {mem[:0], 0, 0, 0},
	}
	target := &Target{direct: os.Stdout, align: granule}
	for name, tc := range cases {
		if head, mid := target.directSpan(tc.p, tc.off); head != tc.head || mid != tc.mid {
			t.Errorf("%s: head %d, middle %d; want %d, %d", name, head, mid, tc.head, tc.mid)
		}
	}
}

// TestDirectRefused falls back to the page cache when the device refuses a direct
// write (here a device of 4 KiB sectors asked to write at 512 bytes), for that write
// and the rest, and loses nothing.
func TestDirectRefused(t *testing.T) {
	dev, backing := loopDevice(t, 4*MiB, 4096, false)
	target, err := Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if target.direct == nil || target.align != 4096 {
		t.Fatalf("direct writes: %v, alignment %d", target.direct != nil, target.align)
	}
	target.align = 512
	p := pageAligned(3 * granule)[:3*granule]
	copy(p, image(len(p), 5))
	if err := target.WriteAt(p, 512); err != nil {
		t.Fatal(err)
	}
	if target.direct != nil || target.directBytes != 0 {
		t.Fatalf("still writing directly after a refusal (%d bytes so)", target.directBytes)
	}
	if err := target.WriteAt(p, 512+int64(len(p))); err != nil {
		t.Fatal(err)
	}
	if err := target.Finish(0); err != nil {
		t.Fatal(err)
	}
	checkHolds(t, backing, append(bytes.Clone(p), p...), 512)
}
