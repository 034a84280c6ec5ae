package proto

import (
	"fmt"
	"strings"
)

// The modes of disk.wipe (DiskWipe.Mode).
const (
	WipeNone        = "none"
	WipeQuick       = "quick"
	WipeSecureErase = "secure-erase"
	WipeCryptoErase = "crypto-erase"
)

// WipeModes lists the modes, in the order the documentation gives them.
var WipeModes = []string{WipeNone, WipeQuick, WipeSecureErase, WipeCryptoErase}

// DiskWipe is the input of disk.wipe.
type DiskWipe struct {
	// Mode is one of WipeModes; empty is quick.
	Mode string `json:"mode,omitempty"`
}

// The methods a disk was wiped with (WipedDisk.Method).
const (
	// WipeMethodSignatures zeroes the first and last MiB and the known superblock
	// offsets, then discards the whole device where it supports it (quick).
	WipeMethodSignatures = "signatures"
	// NVMe Format NVM with Secure Erase Settings 1 (user data) or 2 (cryptographic).
	WipeMethodNVMeFormatUserData = "nvme-format-user-data-erase"
	WipeMethodNVMeFormatCrypto   = "nvme-format-crypto-erase"
	// NVMe Sanitize with the block erase or crypto erase action.
	WipeMethodNVMeSanitizeBlock  = "nvme-sanitize-block-erase"
	WipeMethodNVMeSanitizeCrypto = "nvme-sanitize-crypto-erase"
	// ATA SECURITY ERASE UNIT (normal erase) and SANITIZE CRYPTO SCRAMBLE over SG_IO.
	WipeMethodATASecurityErase  = "ata-security-erase"
	WipeMethodATACryptoScramble = "ata-sanitize-crypto-scramble"
	// BLKSECDISCARD over the whole device.
	WipeMethodSecureDiscard = "blksecdiscard"
)

// What a read-back expects of the blocks it reads (ReadBack.Expect).
const (
	// ExpectZeroes: every byte reads 0x00.
	ExpectZeroes = "zeroes"
	// ExpectOnes: every byte reads 0xff (an NVMe namespace whose deallocated blocks read
	// as ones).
	ExpectOnes = "ones"
	// ExpectChanged: the device promises no pattern, so every sampled block must read
	// differently from what it held before the erase, or as all zeroes or all ones.
	ExpectChanged = "changed"
)

// DiskWipeResult is the result of disk.wipe as the ramdisk signs it.
type DiskWipeResult struct {
	Mode  string      `json:"mode"`
	Disks []WipedDisk `json:"disks"`
	// Skipped are the block devices the wipe leaves out, with the reason: the
	// ramdisk's own media, removable and virtual media, read-only devices.
	Skipped []SkippedDisk `json:"skipped,omitempty"`
}

// SkippedDisk is a block device disk.wipe leaves out.
type SkippedDisk struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// WipedDisk is what disk.wipe did to one disk.
type WipedDisk struct {
	// Name is the kernel's name (nvme0n1, sda, vda); the device is /dev/<name>.
	Name      string `json:"name"`
	Model     string `json:"model,omitempty"`
	Serial    string `json:"serial,omitempty"`
	SizeBytes int64  `json:"sizeBytes"`
	// Transport is nvme, sata, virtio or another bus the kernel names (scsi, usb, ...).
	Transport string `json:"transport,omitempty"`
	// Method is how the disk was wiped (WipeMethod*); empty when it was not.
	Method string `json:"method,omitempty"`
	// Wiped says the method ran to its end. Unwiped says why a disk was not wiped in this
	// mode (no method the device offers, ATA security frozen or locked, a failure).
	Wiped    bool   `json:"wiped"`
	Unwiped  string `json:"unwiped,omitempty"`
	Bytes    int64  `json:"bytes"`
	Duration string `json:"duration"`
	// Discarded says a quick wipe discarded the whole device.
	Discarded bool `json:"discarded,omitempty"`
	// ReadBack is the check of what the disk reads after the wipe; nil when not wiped.
	ReadBack *ReadBack `json:"readBack,omitempty"`
	// Hidden is the capacity of the disk's device that no wipe of its block device
	// reaches, asked of the device before the wipe: a wipe of a disk with any is never
	// attested, however its method and read-back went.
	Hidden []HiddenCapacity `json:"hidden,omitempty"`
}

// The kinds of capacity a wipe cannot reach (HiddenCapacity.Kind).
const (
	// HiddenNVMeNamespace is an NVMe namespace allocated in the controller's NVM but not
	// attached to the controller: no block device shows it.
	HiddenNVMeNamespace = "nvme-namespace-detached"
	// HiddenNVMeUnallocated is NVM capacity of the controller (TNVMCAP) in no namespace.
	HiddenNVMeUnallocated = "nvme-capacity-unallocated"
	// HiddenATAHPA is an ATA Host Protected Area: the device's native max address above
	// the max address it shows.
	HiddenATAHPA = "ata-host-protected-area"
	// HiddenUnchecked is a device that could not be asked: what it hides is unknown.
	HiddenUnchecked = "unchecked"
)

// HiddenCapacity is capacity of a disk's device that a wipe of its block device does not
// reach.
type HiddenCapacity struct {
	// Kind is one of the Hidden* kinds.
	Kind string `json:"kind"`
	// NSID is a detached NVMe namespace's id.
	NSID uint32 `json:"nsid,omitempty"`
	// Bytes is how much capacity it is; 0 when unchecked.
	Bytes int64 `json:"bytes,omitempty"`
	// Error is why the device could not be asked (unchecked).
	Error string `json:"error,omitempty"`
}

// HoldsData says whether h, capacity a disk's wipe does not reach, may hold an earlier
// tenant's data: a detached namespace, an HPA, or a device that could not be asked. NVM
// in no namespace does not: no host addresses it until a namespace is made over it, whose
// blocks begin deallocated. Drives report it where an operator sized a namespace below
// the drive for over-provisioning, or at the namespace granularity's remainder, and
// refusing it would refuse every wipe of such a drive. The registry attests no wipe of a
// disk with any capacity that holds data; the inventory warns of it before.
func (h HiddenCapacity) HoldsData() bool { return h.Kind != HiddenNVMeUnallocated }

// HiddenText says what a disk hides from its wipe, entry by entry.
func HiddenText(hidden []HiddenCapacity) string {
	parts := make([]string, len(hidden))
	for i, h := range hidden {
		switch {
		case h.Kind == HiddenNVMeNamespace:
			parts[i] = fmt.Sprintf("%s %d (%d bytes)", h.Kind, h.NSID, h.Bytes)
		case h.Error != "":
			parts[i] = fmt.Sprintf("%s (%s)", h.Kind, h.Error)
		default:
			parts[i] = fmt.Sprintf("%s (%d bytes)", h.Kind, h.Bytes)
		}
	}
	return strings.Join(parts, ", ")
}

// ReadBack is the check that a wiped disk reads what its method promises: the first and
// last MiB and Blocks random blocks.
type ReadBack struct {
	// Expect is ExpectZeroes, ExpectOnes or ExpectChanged; a quick wipe expects zeroes
	// where the signatures were (and no signature anywhere it reads).
	Expect string `json:"expect"`
	// Blocks is how many random blocks of BlockSize bytes were read beside the first and
	// last MiB.
	Blocks    int   `json:"blocks"`
	BlockSize int64 `json:"blockSize"`
	Passed    bool  `json:"passed"`
	// Failure says where the disk read what it should not.
	Failure string `json:"failure,omitempty"`
}

// WipeProgress is disk.wipe's progress report: per disk, the percent done.
type WipeProgress struct {
	Mode    string         `json:"mode"`
	Percent map[string]int `json:"percent"`
}
