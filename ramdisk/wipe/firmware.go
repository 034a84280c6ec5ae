package wipe

import (
	"os"

	"github.com/better-compute/better-compute/proto"
)

// Firmware asks d's firmware what it can erase with the commands the wipe asks it before
// it erases (NVMe Identify Controller, ATA IDENTIFY DEVICE), and what capacity it hides
// from a wipe as the wipe asks it (hiddenCapacity), erasing nothing: the inventory
// reports it beside each disk. Nil for a disk that is neither NVMe nor SATA.
func Firmware(d Disk) *proto.FirmwareErase {
	if d.Transport != "nvme" && d.Transport != "sata" {
		return nil
	}
	out := &proto.FirmwareErase{}
	f, err := os.Open(d.Path)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	defer f.Close()
	out.Hidden = hiddenCapacity(d, f)
	if d.Transport == "sata" {
		s, err := ataDevice{f}.identify()
		if err != nil {
			out.Error = "ATA IDENTIFY DEVICE: " + err.Error()
			return out
		}
		out.ATASecurityErase, out.ATACryptoScramble, out.ATAFrozen, out.ATALocked = s.Supported, s.CryptoScramble, s.Frozen, s.Locked
		return out
	}
	dev, err := openNVMe(f, d.Controller)
	if err != nil {
		out.Error = "NVMe: " + err.Error()
		return out
	}
	defer dev.close(f)
	c, _, err := dev.identify()
	if err != nil {
		out.Error = "NVMe identify: " + err.Error()
		return out
	}
	out.NVMeFormat, out.NVMeFormatCrypto = c.Format, c.Format && c.CryptoErase
	out.NVMeSanitizeBlock, out.NVMeSanitizeCrypto = c.SanitizeBlock, c.SanitizeCrypto
	return out
}
