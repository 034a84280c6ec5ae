package wipe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// A disk the firmware cannot be asked of (a file, as in tests and on a machine whose
// kernel refuses the ioctl) says why, and its hidden capacity is unchecked, as a wipe of
// it would report (hiddenCapacity, whose answers TestNVMeHidden and TestATAHidden read);
// a disk on another bus is not asked.
func TestFirmware(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(path, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	for transport, says := range map[string]string{"nvme": "NVME_IOCTL_ID", "sata": "ATA IDENTIFY DEVICE"} {
		got := Firmware(Disk{Path: path, DiskInfo: proto.DiskInfo{Transport: transport}})
		if got == nil || !strings.Contains(got.Error, says) || got.NVMeFormat || got.ATASecurityErase {
			t.Errorf("%s on a file: %+v", transport, got)
		}
		if got == nil || len(got.Hidden) != 1 || got.Hidden[0].Kind != proto.HiddenUnchecked || !strings.Contains(got.Hidden[0].Error, says) || !got.Hidden[0].HoldsData() {
			t.Errorf("%s on a file: hidden %+v, want one unchecked entry saying %q", transport, got.Hidden, says)
		}
	}
	if got := Firmware(Disk{Path: path, DiskInfo: proto.DiskInfo{Transport: "virtio"}}); got != nil {
		t.Errorf("virtio: %+v", got)
	}
}
