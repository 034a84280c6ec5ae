package deploy

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/fetch/fetchtest"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/ramdisk/disk"
	"github.com/better-compute/better-compute/ramdisk/firstboot"
	"github.com/better-compute/better-compute/ramdisk/gpt"
	"github.com/better-compute/better-compute/ramdisk/gpt/gpttest"
	"github.com/better-compute/better-compute/ramdisk/mount"
)

// loopTarget attaches a loop device over a fresh file of size bytes: a real block
// device to deploy onto. Loop devices say they are rotational; solid says otherwise,
// so that the device's zeroing offload is used.
func loopTarget(t *testing.T, size int64, solid bool) string {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "backing"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	loop, err := mount.AttachLoop(f, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { loop.Close() })
	if solid {
		rot := filepath.Join("/sys/block", filepath.Base(loop.Path()), "queue/rotational")
		if err := os.WriteFile(rot, []byte("0"), 0); err != nil {
			t.Fatal(err)
		}
	}
	return loop.Path()
}

// seeded reads the cloud-init user data back from the written disk's root partition.
func seeded(t *testing.T, target string) string {
	t.Helper()
	f, err := os.OpenFile(target, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	parts, err := gpt.Read(f, 512)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := gpt.Root(parts)
	m, err := mount.Partition(f, root.Offset, root.Size)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmount()
	b, _ := os.ReadFile(filepath.Join(m.Dir, "var/lib/cloud/seed/nocloud/user-data"))
	return string(b)
}

func TestImageOntoOS(t *testing.T) {
	imgPath := filepath.Join(t.TempDir(), "os.raw")
	gpttest.OSImage(t, imgPath, "root")
	raw, err := os.ReadFile(imgPath)
	if err != nil {
		t.Fatal(err)
	}
	art := compress(t, raw, proto.CompressionZstd)
	userData := "#cloud-config\nhostname: n1\n"
	cloudInit := firstboot.Files{UserData: []byte(userData), Kind: firstboot.KindCloudInit, Config: []byte("version = 1\n")}
	cases := map[string]struct {
		loop, solid bool
		files       firstboot.Files
		wantCode    proto.Code
		wantSeeded  string
		wantZeroes  bool
	}{
		"rotational loop device, every block written": {loop: true},
		"solid loop device, zeroed out first":         {loop: true, solid: true, wantZeroes: true},
		"loop device, cloud-init":                     {loop: true, files: cloudInit, wantSeeded: userData},
		"file, cloud-init":                            {files: cloudInit, wantSeeded: userData, wantZeroes: true},
		"ignition without a boot partition": {files: firstboot.Files{UserData: []byte(`{"ignition":{"version":"3.4.0"}}`),
			Kind: firstboot.KindIgnition}, wantCode: proto.Unsupported},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := fetchtest.New(t)
			target := emptyDisk(t)
			if tc.loop {
				target = loopTarget(t, 80<<20, tc.solid)
			}
			res, err := Image(context.Background(), Input{SourceURL: s.Put("/os", art), Digest: digest(art), Format: proto.FormatRaw,
				Compression: proto.CompressionZstd, Target: target, FirstBoot: tc.files}, fast)
			if tc.wantCode != "" {
				if proto.CodeOf(err) != tc.wantCode {
					t.Fatalf("Image: %v, want %s", err, tc.wantCode)
				}
				got, _ := os.ReadFile(target)
				checkWiped(t, got)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.ZeroesKnown != tc.wantZeroes || (res.Skipped > 0) != tc.wantZeroes {
				t.Errorf("zeros known %v, skipped %d; want zeros known %v", res.ZeroesKnown, res.Skipped, tc.wantZeroes)
			}
			if tc.files.Empty() && prefixDigest(t, target, int64(len(raw))) != digest(raw) {
				t.Fatal("the disk does not hold the image")
			}
			if tc.wantSeeded != "" {
				if got := seeded(t, target); got != tc.wantSeeded {
					t.Fatalf("user data on the disk: %q", got)
				}
			}
		})
	}
}

// TestImageOntoABlockDevice deploys onto loop devices, where the writes' aligned parts
// bypass the page cache: an image whose zero runs cross the writer's blocks and whose
// length is no multiple of a sector is on the disk byte for byte, followed by zeros,
// whether the zeros were skipped or written.
func TestImageOntoABlockDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a block device target needs root")
	}
	raw := diskImage(3*disk.BlockSize+5*4096+777, 3)
	clear(raw[disk.BlockSize-200<<10 : disk.BlockSize+300<<10])
	copy(raw[2*disk.BlockSize-5:], "data across a block boundary")
	raw[len(raw)-1] = 0xff
	art := compress(t, raw, proto.CompressionZstd)
	for name, solid := range map[string]bool{"zeros skipped": true, "zeros written": false} {
		t.Run(name, func(t *testing.T) {
			s := fetchtest.New(t)
			target := loopTarget(t, 32<<20, solid)
			res, err := Image(context.Background(), Input{SourceURL: s.Put("/img", art), Digest: digest(art), Format: proto.FormatRaw,
				Compression: proto.CompressionZstd, Target: target}, fast)
			if err != nil {
				t.Fatal(err)
			}
			if res.ZeroesKnown != solid || (res.Skipped > 0) != solid || res.Written+res.Skipped != int64(len(raw)) {
				t.Errorf("zeros known %v, written %d, skipped %d of %d", res.ZeroesKnown, res.Written, res.Skipped, len(raw))
			}
			got, err := os.ReadFile(target)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:len(raw)], raw) || !bytes.Equal(got[len(raw):], make([]byte, len(got)-len(raw))) {
				t.Fatal("the disk does not hold the image followed by zeros")
			}
		})
	}
}

func TestImageLargerThanDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a block device target needs root")
	}
	raw := bytes.Repeat([]byte("x"), 3<<20)
	s := fetchtest.New(t)
	target := loopTarget(t, 2<<20, false)
	_, err := Image(context.Background(), Input{SourceURL: s.Put("/img", raw), Digest: digest(raw), Format: proto.FormatRaw,
		Compression: proto.CompressionNone, Target: target}, fast)
	if e := proto.AsError(err); e.Code != proto.DriverError || e.Details.Reason != proto.ReasonDiskWrite {
		t.Fatalf("Image: %v, want DRIVER_ERROR disk-write", err)
	}
	got, _ := os.ReadFile(target)
	checkWiped(t, got)
}
