package wipe

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime"
	"time"
	"unsafe"

	"github.com/better-compute/better-compute/proto"
	"golang.org/x/sys/unix"
)

// nvmeAdminCmd is the kernel's struct nvme_passthru_cmd (linux/nvme_ioctl.h), 72 bytes.
type nvmeAdminCmd struct {
	Opcode      uint8
	Flags       uint8
	Rsvd1       uint16
	NSID        uint32
	Cdw2, Cdw3  uint32
	Metadata    uint64
	Addr        uint64
	MetadataLen uint32
	DataLen     uint32
	Cdw10       uint32
	Cdw11       uint32
	Cdw12       uint32
	Cdw13       uint32
	Cdw14       uint32
	Cdw15       uint32
	TimeoutMs   uint32
	Result      uint32
}

// The ioctls of linux/nvme_ioctl.h: NVME_IOCTL_ID = _IO('N', 0x40), NVME_IOCTL_ADMIN_CMD
// = _IOWR('N', 0x41, struct nvme_admin_cmd).
const (
	nvmeIoctlID       = 0x4e40
	nvmeIoctlAdminCmd = 0xc0484e41
)

// NVMe admin opcodes and values this package sends.
const (
	nvmeOpGetLogPage = 0x02
	nvmeOpIdentify   = 0x06
	nvmeOpFormat     = 0x80
	nvmeOpSanitize   = 0x84

	nvmeCNSNamespace  = 0x00
	nvmeCNSController = 0x01
	// The active namespace list (attached to this controller), the allocated namespace
	// list (every namespace of the NVM subsystem's NVM, attached or not) and Identify
	// Namespace of an allocated namespace, attached or not.
	nvmeCNSActiveList    = 0x02
	nvmeCNSAllocatedList = 0x10
	nvmeCNSAllocated     = 0x11

	nvmeLogSanitize = 0x81

	// Secure Erase Settings of Format NVM (CDW10 bits 11:9).
	nvmeSESUserData = 1
	nvmeSESCrypto   = 2
	// Sanitize actions (CDW10 bits 2:0).
	nvmeSanitizeBlock  = 2
	nvmeSanitizeCrypto = 4
)

// NVMeController is what Identify Controller says about erasing.
type NVMeController struct {
	// Format is OACS bit 1: the controller supports Format NVM.
	Format bool
	// FormatAllNamespaces (FNA bit 0) formats every namespace together; CryptoErase (FNA
	// bit 2) is Format NVM's cryptographic erase.
	FormatAllNamespaces, CryptoErase bool
	// SanitizeCrypto and SanitizeBlock are SANICAP bits 0 and 1.
	SanitizeCrypto, SanitizeBlock bool
	// NamespaceManagement is OACS bit 3: namespaces can be created, deleted, attached and
	// detached, so some may be allocated but not attached.
	NamespaceManagement bool
	// TotalBytes is TNVMCAP, the controller's NVM capacity in bytes (0: not reported).
	TotalBytes int64
}

// parseIdentifyController reads the 4096-byte Identify Controller data structure.
func parseIdentifyController(b []byte) (NVMeController, error) {
	if len(b) < 4096 {
		return NVMeController{}, fmt.Errorf("identify controller: %d bytes, want 4096", len(b))
	}
	oacs := binary.LittleEndian.Uint16(b[256:])
	sanicap := binary.LittleEndian.Uint32(b[328:])
	fna := b[524]
	return NVMeController{
		Format:              oacs&(1<<1) != 0,
		NamespaceManagement: oacs&(1<<3) != 0,
		TotalBytes:          capacity128(b[280:296]),
		FormatAllNamespaces: fna&(1<<0) != 0,
		CryptoErase:         fna&(1<<2) != 0,
		SanitizeCrypto:      sanicap&(1<<0) != 0,
		SanitizeBlock:       sanicap&(1<<1) != 0,
	}, nil
}

// capacity128 is a 128-bit little-endian byte count, at most the largest int64.
func capacity128(b []byte) int64 {
	low, high := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
	if high != 0 || low > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(low)
}

// NVMeNamespace is what Identify Namespace says about formatting and reading.
type NVMeNamespace struct {
	// FLBAS and DPS are kept by a Format: the same LBA format, metadata and protection.
	FLBAS, DPS uint8
	// DeallocatedReads is what a deallocated block reads as (DLFEAT bits 2:0):
	// ExpectZeroes (001b), ExpectOnes (010b), or "" when the namespace does not say.
	DeallocatedReads string
	// Bytes is the NVM the namespace takes: NVMCAP, or where it is not reported NCAP
	// blocks of the LBA format's data size.
	Bytes int64
}

// parseIdentifyNamespace reads the 4096-byte Identify Namespace data structure.
func parseIdentifyNamespace(b []byte) (NVMeNamespace, error) {
	if len(b) < 4096 {
		return NVMeNamespace{}, fmt.Errorf("identify namespace: %d bytes, want 4096", len(b))
	}
	ns := NVMeNamespace{FLBAS: b[26], DPS: b[29], Bytes: capacity128(b[48:64])}
	if ns.Bytes == 0 {
		// The LBA format in use: FLBAS bits 3:0, and 6:5 above 16 formats; LBADS is
		// byte 2 of its 4-byte descriptor at 128.
		lbads := b[128+4*int(ns.FLBAS&0x0f|(ns.FLBAS>>5&3)<<4)+2]
		ncap := binary.LittleEndian.Uint64(b[8:])
		if lbads < 63 && ncap <= math.MaxInt64>>lbads {
			ns.Bytes = int64(ncap) << lbads
		} else {
			ns.Bytes = math.MaxInt64
		}
	}
	switch b[33] & 7 {
	case 1:
		ns.DeallocatedReads = proto.ExpectZeroes
	case 2:
		ns.DeallocatedReads = proto.ExpectOnes
	}
	return ns, nil
}

// formatCdw10 is Format NVM's CDW10 keeping the namespace's LBA format, metadata
// setting and protection, with Secure Erase Settings ses.
func formatCdw10(ns NVMeNamespace, ses uint32) uint32 {
	lbaf := uint32(ns.FLBAS & 0x0f)
	lbafu := uint32(ns.FLBAS>>5) & 3
	mset := uint32(ns.FLBAS>>4) & 1
	pi := uint32(ns.DPS) & 7
	pil := uint32(ns.DPS>>3) & 1
	return lbaf | mset<<4 | pi<<5 | pil<<8 | ses<<9 | lbafu<<12
}

// sanitizeStatus reads the Sanitize Status log page: progress (SPROG/65536) and state
// (SSTAT bits 2:0: 1 completed, 2 in progress, 3 failed, 4 completed without
// deallocation).
func parseSanitizeStatus(b []byte) (progress float64, state uint16, err error) {
	if len(b) < 4 {
		return 0, 0, fmt.Errorf("sanitize status log: %d bytes", len(b))
	}
	return float64(binary.LittleEndian.Uint16(b[0:])) / 65536, binary.LittleEndian.Uint16(b[2:]) & 7, nil
}

// nvmeDevice is an NVMe namespace opened for admin commands.
type nvmeDevice struct {
	f    *os.File // the controller's character device, or the namespace's block device
	nsid uint32
}

// openNVMe opens the admin path of the namespace at block, whose controller's character
// device is ctrl ("" when it has none: the namespace's own device takes admin commands
// too).
func openNVMe(block *os.File, ctrl string) (*nvmeDevice, error) {
	nsid, _, errno := unix.Syscall(unix.SYS_IOCTL, block.Fd(), nvmeIoctlID, 0)
	if errno != 0 {
		return nil, fmt.Errorf("NVME_IOCTL_ID: %w", errno)
	}
	d := &nvmeDevice{f: block, nsid: uint32(nsid)}
	if ctrl != "" {
		if f, err := os.OpenFile(ctrl, os.O_RDWR, 0); err == nil {
			d.f = f
		}
	}
	return d, nil
}

func (d *nvmeDevice) close(block *os.File) {
	if d.f != block {
		d.f.Close()
	}
}

// admin runs one admin command, with data (if any) as its buffer.
func (d *nvmeDevice) admin(cmd nvmeAdminCmd, data []byte) error {
	if len(data) > 0 {
		cmd.Addr = uint64(uintptr(unsafe.Pointer(&data[0])))
		cmd.DataLen = uint32(len(data))
	}
	status, _, errno := unix.Syscall(unix.SYS_IOCTL, d.f.Fd(), nvmeIoctlAdminCmd, uintptr(unsafe.Pointer(&cmd)))
	runtime.KeepAlive(data)
	if errno != 0 {
		return fmt.Errorf("NVMe admin opcode %#02x: %w", cmd.Opcode, errno)
	}
	if status != 0 {
		// A positive answer is the command's NVMe status: type (bits 10:8), code (7:0).
		return fmt.Errorf("NVMe admin opcode %#02x: status type %d code %#02x", cmd.Opcode, status>>8&7, status&0xff)
	}
	return nil
}

func (d *nvmeDevice) identify() (NVMeController, NVMeNamespace, error) {
	buf := make([]byte, 4096)
	if err := d.admin(nvmeAdminCmd{Opcode: nvmeOpIdentify, Cdw10: nvmeCNSController}, buf); err != nil {
		return NVMeController{}, NVMeNamespace{}, err
	}
	c, err := parseIdentifyController(buf)
	if err != nil {
		return c, NVMeNamespace{}, err
	}
	clear(buf)
	if err := d.admin(nvmeAdminCmd{Opcode: nvmeOpIdentify, NSID: d.nsid, Cdw10: nvmeCNSNamespace}, buf); err != nil {
		return c, NVMeNamespace{}, err
	}
	ns, err := parseIdentifyNamespace(buf)
	return c, ns, err
}

// format runs Format NVM with ses on the namespace; it returns when the controller has
// formatted it (the kernel then revalidates the namespace).
func (d *nvmeDevice) format(ns NVMeNamespace, ses uint32, timeout time.Duration) error {
	return d.admin(nvmeAdminCmd{Opcode: nvmeOpFormat, NSID: d.nsid, Cdw10: formatCdw10(ns, ses), TimeoutMs: uint32(timeout.Milliseconds())}, nil)
}

// sanitize starts a Sanitize with action and waits until the controller reports it done,
// reporting its progress (0 to 1).
func (d *nvmeDevice) sanitize(ctx context.Context, action uint32, progress func(float64)) error {
	if err := d.admin(nvmeAdminCmd{Opcode: nvmeOpSanitize, Cdw10: action}, nil); err != nil {
		return err
	}
	buf := make([]byte, 512)
	for {
		clear(buf)
		err := d.admin(nvmeAdminCmd{Opcode: nvmeOpGetLogPage, NSID: 0xffffffff, Cdw10: nvmeLogSanitize | (uint32(len(buf)/4-1) << 16)}, buf)
		if err != nil {
			return err
		}
		p, state, err := parseSanitizeStatus(buf)
		if err != nil {
			return err
		}
		switch state {
		case 1, 4:
			return nil
		case 3:
			return fmt.Errorf("the controller reports the sanitize failed")
		case 2:
			progress(p)
		default:
			return fmt.Errorf("the controller reports no sanitize (status %d)", state)
		}
		// A sanitize continues in the controller whatever the agent does; a cancelled
		// wait stops only the waiting.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}
