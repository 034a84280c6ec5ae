package cli

import (
	"testing"

	"github.com/better-compute/better-compute/proto"
)

func TestFirmwareEraseText(t *testing.T) {
	for want, f := range map[string]*proto.FirmwareErase{
		"-":                                     nil,
		"none":                                  {},
		"unknown (NVMe: NVME_IOCTL_ID)":         {Error: "NVMe: NVME_IOCTL_ID"},
		"format, crypto format, sanitize block": {NVMeFormat: true, NVMeFormatCrypto: true, NVMeSanitizeBlock: true},
		"security erase, (frozen)":              {ATASecurityErase: true, ATAFrozen: true},
	} {
		if got := firmwareEraseText(f); got != want {
			t.Errorf("%+v: %q, want %q", f, got, want)
		}
	}
}
