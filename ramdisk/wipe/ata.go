package wipe

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sgIOHdr is the kernel's struct sg_io_hdr (scsi/sg.h) on 64-bit Linux, 88 bytes.
type sgIOHdr struct {
	InterfaceID    int32
	DxferDirection int32
	CmdLen         uint8
	MxSbLen        uint8
	IovecCount     uint16
	DxferLen       uint32
	Dxferp         uintptr
	Cmdp           uintptr
	Sbp            uintptr
	Timeout        uint32
	Flags          uint32
	PackID         int32
	_              uint32
	UsrPtr         uintptr
	Status         uint8
	MaskedStatus   uint8
	MsgStatus      uint8
	SbLenWr        uint8
	HostStatus     uint16
	DriverStatus   uint16
	Resid          int32
	Duration       uint32
	Info           uint32
	_              uint32
}

const (
	sgIO            = 0x2285
	sgDxferNone     = -1
	sgDxferToDev    = -2
	sgDxferFromDev  = -3
	ataPassThrough  = 0x85 // ATA PASS-THROUGH (16)
	ataIdentify     = 0xec
	ataSetPassword  = 0xf1
	ataErasePrepare = 0xf3
	ataEraseUnit    = 0xf4
	ataDisablePass  = 0xf6
	ataSanitize     = 0xb4
	// READ NATIVE MAX ADDRESS and its 48-bit EXT: the last LBA the device has, above
	// the one it shows when a Host Protected Area is set.
	ataReadNativeMax    = 0xf8
	ataReadNativeMaxExt = 0x27
	// ATA protocols of the pass-through CDB.
	ataNonData = 3
	ataPIOIn   = 4
	ataPIOOut  = 5
	// SANITIZE DEVICE feature codes, and the signature CRYPTO SCRAMBLE EXT carries in its
	// LBA ("Cryp").
	ataSanitizeStatus  = 0x0000
	ataCryptoScramble  = 0x0011
	ataCryptoSignature = 0x43727970
)

// ataCDB is an ATA PASS-THROUGH (16) CDB: a 48-bit (extend) command with a 512-byte
// PIO block in or out, or none.
func ataCDB(protocol uint8, command uint8, feature uint16, count uint16, lba uint64) [16]byte {
	var c [16]byte
	c[0] = ataPassThrough
	c[1] = protocol<<1 | 1 // extend
	switch protocol {
	case ataPIOIn:
		c[2] = 0x0e // T_DIR in, BYTE_BLOCK, T_LENGTH in the sector count
	case ataPIOOut:
		c[2] = 0x06
	default:
		c[2] = 0x20 // CK_COND: return the registers (SANITIZE STATUS)
	}
	c[3], c[4] = byte(feature>>8), byte(feature)
	c[5], c[6] = byte(count>>8), byte(count)
	c[7], c[8] = byte(lba>>24), byte(lba)
	c[9], c[10] = byte(lba>>32), byte(lba>>8)
	c[11], c[12] = byte(lba>>40), byte(lba>>16)
	c[13] = 0x40 // LBA mode
	c[14] = command
	return c
}

// ATASecurity is what IDENTIFY DEVICE says about erasing (ACS-3: word 82 bit 1, word 128,
// words 89 and 59).
type ATASecurity struct {
	// Supported is the security feature set; Enabled a password is set; Locked the
	// device refuses access until unlocked; Frozen it refuses security commands until
	// the next power cycle (a BIOS freezes disks at boot).
	Supported, Enabled, Locked, Frozen bool
	// EraseTime is the device's estimate of a normal erase (0: not reported).
	EraseTime time.Duration
	// CryptoScramble is the SANITIZE feature set with CRYPTO SCRAMBLE.
	CryptoScramble bool
	// HostProtectedArea is the HPA feature set (word 82 bit 10); LBA48 the 48-bit
	// address feature set (word 83 bit 10).
	HostProtectedArea, LBA48 bool
	// Sectors is how many logical sectors the device shows (words 100-103 with 48-bit
	// addresses, else 60-61), of SectorSize bytes (words 117-118 where word 106 says so,
	// else 512).
	Sectors    uint64
	SectorSize int64
}

// parseATAIdentify reads the 512 bytes of IDENTIFY DEVICE.
func parseATAIdentify(b []byte) (ATASecurity, error) {
	if len(b) < 512 {
		return ATASecurity{}, fmt.Errorf("identify device: %d bytes, want 512", len(b))
	}
	word := func(n int) uint16 { return binary.LittleEndian.Uint16(b[2*n:]) }
	s := ATASecurity{Supported: word(82)&(1<<1) != 0}
	if w := word(128); s.Supported {
		s.Enabled, s.Locked, s.Frozen = w&(1<<1) != 0, w&(1<<2) != 0, w&(1<<3) != 0
	}
	if t := word(89); t&0x8000 != 0 {
		s.EraseTime = time.Duration(t&0x7fff) * 2 * time.Minute // extended format
	} else if t != 0 {
		s.EraseTime = time.Duration(t&0xff) * 2 * time.Minute
	}
	s.CryptoScramble = word(59)&(1<<12) != 0 && word(59)&(1<<13) != 0
	s.HostProtectedArea, s.LBA48 = word(82)&(1<<10) != 0, word(83)&(1<<10) != 0
	s.Sectors = uint64(word(60)) | uint64(word(61))<<16
	if s.LBA48 {
		s.Sectors = uint64(word(100)) | uint64(word(101))<<16 | uint64(word(102))<<32 | uint64(word(103))<<48
	}
	s.SectorSize = 512
	if w := word(106); w&0xc000 == 0x4000 && w&(1<<12) != 0 {
		s.SectorSize = 2 * int64(uint32(word(117))|uint32(word(118))<<16)
	}
	return s, nil
}

// passwordBlock is the 512-byte data of SECURITY SET PASSWORD, ERASE UNIT and DISABLE
// PASSWORD for the user password pw (normal erase, not enhanced).
func passwordBlock(pw string) []byte {
	b := make([]byte, 512)
	copy(b[2:34], pw)
	return b
}

// ataDevice is a SATA disk reached through SG_IO.
type ataDevice struct{ f *os.File }

// command runs one pass-through command with data in or out (nil for none).
func (d ataDevice) command(cdb [16]byte, data []byte, in bool, timeout time.Duration) (sense [32]byte, err error) {
	h := sgIOHdr{InterfaceID: 'S', DxferDirection: sgDxferNone, CmdLen: 16, MxSbLen: uint8(len(sense)),
		Cmdp: uintptr(unsafe.Pointer(&cdb[0])), Sbp: uintptr(unsafe.Pointer(&sense[0])), Timeout: uint32(timeout.Milliseconds())}
	if len(data) > 0 {
		h.DxferDirection, h.DxferLen, h.Dxferp = sgDxferToDev, uint32(len(data)), uintptr(unsafe.Pointer(&data[0]))
		if in {
			h.DxferDirection = sgDxferFromDev
		}
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, d.f.Fd(), sgIO, uintptr(unsafe.Pointer(&h)))
	runtime.KeepAlive(data)
	runtime.KeepAlive(&cdb)
	runtime.KeepAlive(&sense)
	if errno != 0 {
		return sense, fmt.Errorf("SG_IO: %w", errno)
	}
	// CHECK CONDITION with ATA status return (sense key 0, ASCQ 0x1d) carries the
	// registers, not an error.
	if h.Status != 0 && !(h.Status == 2 && ataRegisters(sense) != nil) || h.HostStatus != 0 {
		return sense, fmt.Errorf("ATA command %#02x: SCSI status %#x host %#x driver %#x sense %x", cdb[14], h.Status, h.HostStatus, h.DriverStatus, sense[:h.SbLenWr])
	}
	if r := ataRegisters(sense); r != nil && r[3]&0x01 != 0 { // ERR in the status register
		return sense, ataAborted{command: cdb[14], error: r[1]}
	}
	return sense, nil
}

// ataAborted is a command the device ended with ERR set: one it refused or lacks.
type ataAborted struct{ command, error byte }

func (e ataAborted) Error() string {
	return fmt.Sprintf("ATA command %#02x aborted (error register %#02x)", e.command, e.error)
}

// ataRegisters is the ATA Status Return descriptor (type 9) of descriptor sense data:
// [type, length, extend, error, count, ..., device, status] returned as
// [extend, error, lbaLow/count..., status] (index 1 error, 3 status, 2 count low).
func ataRegisters(sense [32]byte) []byte {
	if sense[0]&0x7f != 0x72 || sense[8] != 0x09 {
		return nil
	}
	d := sense[8:22]
	// d: 0 type, 1 len, 2 extend, 3 error, 4 count(15:8), 5 count(7:0), 6-11 lba,
	// 12 device, 13 status.
	return []byte{d[2], d[3], d[5], d[13]}
}

// ataLBA is the LBA field of the ATA Status Return descriptor: 48 bits, or 28 (its top
// 4 in the device register) for a command without 48-bit addresses.
func ataLBA(sense [32]byte, lba48 bool) (uint64, bool) {
	if ataRegisters(sense) == nil {
		return 0, false
	}
	d := sense[8:22]
	// d: 6 LBA(31:24), 7 LBA(7:0), 8 LBA(39:32), 9 LBA(15:8), 10 LBA(47:40), 11
	// LBA(23:16), 12 device.
	lba := uint64(d[11])<<16 | uint64(d[9])<<8 | uint64(d[7])
	if lba48 {
		return lba | uint64(d[6])<<24 | uint64(d[8])<<32 | uint64(d[10])<<40, true
	}
	return lba | uint64(d[12]&0x0f)<<24, true
}

func (d ataDevice) identify() (ATASecurity, error) {
	buf := make([]byte, 512)
	if _, err := d.command(ataCDB(ataPIOIn, ataIdentify, 0, 1, 0), buf, true, 30*time.Second); err != nil {
		return ATASecurity{}, err
	}
	return parseATAIdentify(buf)
}

// securityErase sets the temporary user password pw (the ATA security feature set erases
// only a device with a password), then SECURITY ERASE PREPARE and SECURITY ERASE UNIT
// (normal erase: the device writes zeroes over every user block). A device that completes
// the erase has security disabled again. If the erase fails after the password was set,
// the password is removed again so the disk is not left locked.
func (d ataDevice) securityErase(pw string, timeout time.Duration) error {
	if _, err := d.command(ataCDB(ataPIOOut, ataSetPassword, 0, 1, 0), passwordBlock(pw), false, 30*time.Second); err != nil {
		return fmt.Errorf("SECURITY SET PASSWORD: %w", err)
	}
	if _, err := d.command(ataCDB(ataNonData, ataErasePrepare, 0, 0, 0), nil, false, 30*time.Second); err != nil {
		d.disablePassword(pw)
		return fmt.Errorf("SECURITY ERASE PREPARE: %w", err)
	}
	if _, err := d.command(ataCDB(ataPIOOut, ataEraseUnit, 0, 1, 0), passwordBlock(pw), false, timeout); err != nil {
		d.disablePassword(pw)
		return fmt.Errorf("SECURITY ERASE UNIT: %w", err)
	}
	return nil
}

func (d ataDevice) disablePassword(pw string) {
	d.command(ataCDB(ataPIOOut, ataDisablePass, 0, 1, 0), passwordBlock(pw), false, 30*time.Second)
}

// cryptoScramble runs SANITIZE CRYPTO SCRAMBLE EXT and polls SANITIZE STATUS EXT until
// the device reports it done, reporting progress (0 to 1, from the LBA field).
func (d ataDevice) cryptoScramble(ctx context.Context, progress func(float64)) error {
	if _, err := d.command(ataCDB(ataNonData, ataSanitize, ataCryptoScramble, 0, ataCryptoSignature), nil, false, 30*time.Second); err != nil {
		return fmt.Errorf("CRYPTO SCRAMBLE EXT: %w", err)
	}
	for {
		sense, err := d.command(ataCDB(ataNonData, ataSanitize, ataSanitizeStatus, 0, 0), nil, false, 30*time.Second)
		if err != nil {
			return fmt.Errorf("SANITIZE STATUS EXT: %w", err)
		}
		done, p, err := sanitizeState(sense)
		if err != nil || done {
			return err
		}
		progress(p)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// sanitizeState reads SANITIZE STATUS EXT's registers: the count field's bit 15
// (SANITIZE OPERATION COMPLETED SUCCESSFULLY), bit 14 (IN PROGRESS), and the progress in
// LBA bits 15:0.
func sanitizeState(sense [32]byte) (done bool, progress float64, err error) {
	if sense[0]&0x7f != 0x72 || sense[8] != 0x09 {
		return false, 0, fmt.Errorf("SANITIZE STATUS EXT returned no registers")
	}
	d := sense[8:22]
	count := uint16(d[4])<<8 | uint16(d[5])
	lba := uint16(d[9])<<8 | uint16(d[7]) // LBA(15:8), LBA(7:0)
	switch {
	case count&(1<<15) != 0:
		return true, 1, nil
	case count&(1<<14) != 0:
		return false, float64(lba) / 65536, nil
	}
	return false, 0, fmt.Errorf("the device reports the sanitize failed (count %#04x)", count)
}
