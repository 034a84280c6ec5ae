package disk_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/ramdisk/disk"
	"github.com/better-compute/better-compute/ramdisk/mount"
)

func TestDiscard(t *testing.T) {
	path := filepath.Join(t.TempDir(), "backing")
	f, err := os.Create(path)
	if err == nil {
		err = f.Truncate(8 << 20)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	t.Run("a file has nothing to discard", func(t *testing.T) {
		target, err := disk.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer target.Close()
		if ok, err := target.Discard(); ok || err != nil {
			t.Errorf("Discard: %v, %v", ok, err)
		}
	})
	t.Run("a loop device discards", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("loop devices need root")
		}
		loop, err := mount.AttachLoop(f, 0, 0)
		if err != nil {
			t.Skip(err)
		}
		defer loop.Close()
		target, err := disk.Open(loop.Path())
		if err != nil {
			t.Fatal(err)
		}
		defer target.Close()
		if ok, err := target.Discard(); !ok || err != nil {
			t.Errorf("Discard: %v, %v", ok, err)
		}
	})
}
