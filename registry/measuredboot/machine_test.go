package measuredboot_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"testing"
	"unicode/utf16"

	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"

	"github.com/better-compute/better-compute/hardware/tpm"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// The machines of these tests are software TPMs (swtpm) into whose SHA-256 bank the test
// extends the events of a boot, as firmware would, with the TCG event log of those
// events: so quotes, PCRs and logs are a real TPM's, and the firmware is the test's.

// event is one event of a test boot; a nil digest is the data's SHA-256.
type event struct {
	pcr    int
	typ    uint32
	data   []byte
	digest []byte
}

func (e event) sum() []byte {
	if e.digest != nil {
		return e.digest
	}
	d := sha256.Sum256(e.data)
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

func digestOf(s string) []byte {
	d := sha256.Sum256([]byte(s))
	return d[:]
}

// boot is the events of a UEFI boot with Secure Boot off: firmware, the variables, the
// separators, the boot loader and kernel.
func boot(kernel string) []event {
	ev := []event{
		{pcr: 0, typ: 0x08, data: utf16le("OVMF test firmware 1.0")},
		{pcr: 0, typ: 0x80000008, data: make([]byte, 16), digest: digestOf("firmware volume")},
		{pcr: 7, typ: 0x80000001, data: variable("SecureBoot", []byte{0})},
	}
	for _, pcr := range []int{0, 1, 2, 3, 4, 5, 6, 7} {
		ev = append(ev, event{pcr: pcr, typ: 0x04, data: []byte{0, 0, 0, 0}})
	}
	return append(ev,
		event{pcr: 4, typ: 0x80000007, data: []byte("Calling EFI Application from Boot Option")},
		event{pcr: 4, typ: 0x80000003, data: image(`\EFI\BOOT\BOOTX64.EFI`), digest: digestOf("boot loader")},
		event{pcr: 4, typ: 0x80000003, data: image(`\vmlinuz`), digest: digestOf(kernel)},
	)
}

// eventLog is the TCG crypto-agile log of events, SHA-256 only.
func eventLog(events []event) []byte {
	var spec bytes.Buffer
	spec.WriteString("Spec ID Event03\x00")
	binary.Write(&spec, binary.LittleEndian, struct {
		PlatformClass                uint32
		Minor, Major, Errata, UintnS uint8
		NumAlgs                      uint32
		Alg, Size                    uint16
		VendorInfo                   uint8
	}{Major: 2, UintnS: 2, NumAlgs: 1, Alg: 0x000B, Size: 32})
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, struct {
		PCR, Type uint32
		Digest    [20]byte
		Size      uint32
	}{Type: 0x03, Size: uint32(spec.Len())})
	b.Write(spec.Bytes())
	for _, e := range events {
		binary.Write(&b, binary.LittleEndian, []uint32{uint32(e.pcr), e.typ, 1})
		binary.Write(&b, binary.LittleEndian, uint16(0x000B))
		b.Write(e.sum())
		binary.Write(&b, binary.LittleEndian, uint32(len(e.data)))
		b.Write(e.data)
	}
	return b.Bytes()
}

// machine is a TPM that booted events, with the log it reports (log, nil for the log of
// events).
func machine(t *testing.T, events []event, log []byte) *tpm.TPM {
	t.Helper()
	if log == nil {
		log = eventLog(events)
	}
	ch := testkit.StartSWTPM(t).Dial(t, log)
	extend(t, ch, events)
	m, err := tpm.OpenChannel(ch)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func extend(t *testing.T, rw io.ReadWriter, events []event) {
	t.Helper()
	for _, e := range events {
		if err := tpm2.PCRExtend(rw, tpmutil.Handle(e.pcr), tpm2.AlgSHA256, e.sum(), ""); err != nil {
			t.Fatalf("extending PCR %d: %v", e.pcr, err)
		}
	}
}

func nonce(t *testing.T) []byte {
	n := make([]byte, 32)
	if _, err := rand.Read(n); err != nil {
		t.Fatal(err)
	}
	return n
}

// enrolled enrolls m and proves its AK by activation, as the registry does.
func enrolled(t *testing.T, m *tpm.TPM) proto.TPMEnrollResult {
	t.Helper()
	e, err := m.Enroll()
	if err != nil {
		t.Fatal(err)
	}
	secret, in, err := challenge(e)
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Activate(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Secret, secret) {
		t.Fatal("the activated secret is not the credential's")
	}
	return e
}

func quote(t *testing.T, m *tpm.TPM, e proto.TPMEnrollResult, n []byte) proto.TPMQuoteResult {
	t.Helper()
	q, err := m.Quote(proto.TPMQuote{AKBlob: e.AKBlob, Nonce: n, PCRs: quoted(proto.DefaultBootPCRs)})
	if err != nil {
		t.Fatal(err)
	}
	return q
}
