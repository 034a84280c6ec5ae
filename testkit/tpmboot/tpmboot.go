// Package tpmboot makes the machines of measured boot's tests: a software TPM (swtpm)
// into whose SHA-256 bank a test boot's events are extended, as firmware would, with the
// TCG event log of those events, opened as the ramdisk opens its TPM (hardware/tpm). So
// quotes, PCRs and logs are a real TPM's, and the firmware is the test's.
package tpmboot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"testing"
	"unicode/utf16"

	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"

	"github.com/better-compute/better-compute/hardware/tpm"
)

// The machines are software TPMs (swtpm) into whose SHA-256 bank the test
// extends the events of a boot, as firmware would, with the TCG event log of those
// events: so quotes, PCRs and logs are a real TPM's, and the firmware is the test's.

// Event is one event of a test boot; a nil digest is the data's SHA-256.
type Event struct {
	PCR    int
	Type   uint32
	Data   []byte
	Digest []byte
}

// Sum is the digest extended.
func (e Event) Sum() []byte {
	if e.Digest != nil {
		return e.Digest
	}
	d := sha256.Sum256(e.Data)
	return d[:]
}

func utf16le(s string) []byte {
	var b []byte
	for _, c := range utf16.Encode([]rune(s)) {
		b = binary.LittleEndian.AppendUint16(b, c)
	}
	return b
}

// variable is a UEFI_VARIABLE_DATA of EFI_GLOBAL_VARIABLE.
func variable(name string, data []byte) []byte {
	guid := []byte{0x61, 0xdf, 0xe4, 0x8b, 0xca, 0x93, 0xd2, 0x11, 0xaa, 0x0d, 0x00, 0xe0, 0x98, 0x03, 0x2b, 0x8c}
	b := append([]byte{}, guid...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len([]rune(name))))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(data)))
	b = append(b, utf16le(name)...)
	return append(b, data...)
}

// Authority is the EV_EFI_VARIABLE_AUTHORITY event of PCR 7 by which firmware says that
// the certificate der (the db entry's EFI_SIGNATURE_DATA: owner GUID, then the
// certificate) verified an image.
func Authority(der []byte) Event {
	return Event{PCR: 7, Type: 0x800000E0, Data: variable("db", append(make([]byte, 16), der...))}
}

// image is a UEFI_IMAGE_LOAD_EVENT whose device path is one media file path node.
func image(path string) []byte {
	p := append(utf16le(path), 0, 0)
	node := []byte{4, 4}
	node = binary.LittleEndian.AppendUint16(node, uint16(4+len(p)))
	node = append(node, p...)
	node = append(node, 0x7f, 0xff, 4, 0) // end of the device path
	b := make([]byte, 24)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(node)))
	return append(b, node...)
}

// DigestOf is the SHA-256 of s.
func DigestOf(s string) []byte {
	d := sha256.Sum256([]byte(s))
	return d[:]
}

// Boot is the events of a UEFI boot with Secure Boot off: firmware, the variables, the
// separators, the boot loader and kernel.
func Boot(kernel string) []Event {
	ev := []Event{
		{PCR: 0, Type: 0x08, Data: utf16le("OVMF test firmware 1.0")},
		{PCR: 0, Type: 0x80000008, Data: make([]byte, 16), Digest: DigestOf("firmware volume")},
		{PCR: 7, Type: 0x80000001, Data: variable("SecureBoot", []byte{0})},
	}
	for _, pcr := range []int{0, 1, 2, 3, 4, 5, 6, 7} {
		ev = append(ev, Event{PCR: pcr, Type: 0x04, Data: []byte{0, 0, 0, 0}})
	}
	return append(ev,
		Event{PCR: 4, Type: 0x80000007, Data: []byte("Calling EFI Application from Boot Option")},
		Event{PCR: 4, Type: 0x80000003, Data: image(`\EFI\BOOT\BOOTX64.EFI`), Digest: DigestOf("boot loader")},
		Event{PCR: 4, Type: 0x80000003, Data: image(`\vmlinuz`), Digest: DigestOf(kernel)},
	)
}

// EventLog is the TCG crypto-agile log of events, SHA-256 only.
func EventLog(events []Event) []byte {
	var b bytes.Buffer
	b.Write(SpecIDEvent(Algorithm{ID: 0x000B, Size: 32}))
	for _, e := range events {
		binary.Write(&b, binary.LittleEndian, []uint32{uint32(e.PCR), e.Type, 1})
		binary.Write(&b, binary.LittleEndian, uint16(0x000B))
		b.Write(e.Sum())
		binary.Write(&b, binary.LittleEndian, uint32(len(e.Data)))
		b.Write(e.Data)
	}
	return b.Bytes()
}

// Algorithm is one digest algorithm a Spec ID event lists: its TPM_ALG_ID and the size
// of its digests in the log.
type Algorithm struct{ ID, Size uint16 }

// SpecIDEvent is the event that opens a crypto-agile log (TCG PC Client Platform
// Firmware Profile, 10.4.5.1), listing algs as the log's digest algorithms.
func SpecIDEvent(algs ...Algorithm) []byte {
	var spec bytes.Buffer
	spec.WriteString("Spec ID Event03\x00")
	binary.Write(&spec, binary.LittleEndian, struct {
		PlatformClass                uint32
		Minor, Major, Errata, UintnS uint8
		NumAlgs                      uint32
	}{Major: 2, UintnS: 2, NumAlgs: uint32(len(algs))})
	binary.Write(&spec, binary.LittleEndian, algs)
	spec.WriteByte(0) // no vendor information
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, struct {
		PCR, Type uint32
		Digest    [20]byte
		Size      uint32
	}{Type: 0x03, Size: uint32(spec.Len())})
	b.Write(spec.Bytes())
	return b.Bytes()
}

// Machine is a new machine's TPM that booted events, with the log it reports (log, nil
// for the log of events).
func Machine(t testing.TB, events []Event, log []byte) (*tpm.TPM, *SWTPM) {
	t.Helper()
	sw := StartSWTPM(t)
	return Reboot(t, sw, events, log), sw
}

// Reboot boots the machine of sw's TPM again, with events and the log it reports (nil
// for the log of events): its keys stay, its PCRs hold the new boot's events.
func Reboot(t testing.TB, sw *SWTPM, events []Event, log []byte) *tpm.TPM {
	t.Helper()
	sw.Reboot(t)
	if log == nil {
		log = EventLog(events)
	}
	ch := sw.Dial(t, log)
	extend(t, ch, events)
	return open(t, ch)
}

// Open opens sw's TPM again, its machine reporting log: as bcd ramdisk opens its TPM
// for each command and closes it after.
func Open(t testing.TB, sw *SWTPM, log []byte) *tpm.TPM {
	t.Helper()
	return open(t, sw.Dial(t, log))
}

func open(t testing.TB, ch *TPMChannel) *tpm.TPM {
	t.Helper()
	m, err := tpm.OpenChannel(ch)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func extend(t testing.TB, rw io.ReadWriter, events []Event) {
	t.Helper()
	for _, e := range events {
		if err := tpm2.PCRExtend(rw, tpmutil.Handle(e.PCR), tpm2.AlgSHA256, e.Sum(), ""); err != nil {
			t.Fatalf("extending PCR %d: %v", e.PCR, err)
		}
	}
}
