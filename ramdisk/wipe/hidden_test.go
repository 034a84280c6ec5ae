package wipe

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// TestNVMeHidden reads what an NVMe controller hides from a wipe of its attached
// namespaces: each allocated namespace not in the active list, with its size (NVMCAP, or
// NCAP blocks of its LBA format where NVMCAP is 0, as qemu's emulation reports it), and
// TNVMCAP beyond every allocated namespace.
func TestNVMeHidden(t *testing.T) {
	list := make([]byte, 4096)
	for i, id := range []uint32{1, 2, 7} {
		binary.LittleEndian.PutUint32(list[4*i:], id)
	}
	if got := parseNamespaceList(list); !reflect.DeepEqual(got, []uint32{1, 2, 7}) {
		t.Errorf("namespace list %v", got)
	}
	identify := func(ncap uint64, lbads byte, nvmcap uint64) NVMeNamespace {
		b := make([]byte, 4096)
		binary.LittleEndian.PutUint64(b[8:], ncap)
		binary.LittleEndian.PutUint64(b[48:], nvmcap)
		b[26] = 1                // LBA format 1
		b[128+4*1+2] = lbads     // its data size
		b[128+4*0+2] = lbads + 3 // format 0, not in use
		ns, err := parseIdentifyNamespace(b)
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}
	// What qemu 7.2 answers for a 64 MiB namespace of 512-byte blocks: NVMCAP 0.
	if ns := identify(131072, 9, 0); ns.Bytes != 64<<20 {
		t.Errorf("NCAP 131072 of 512 bytes: %d bytes", ns.Bytes)
	}
	if ns := identify(131072, 12, 5<<30); ns.Bytes != 5<<30 {
		t.Errorf("NVMCAP 5 GiB: %d bytes", ns.Bytes)
	}
	ctrl := make([]byte, 4096)
	binary.LittleEndian.PutUint16(ctrl[256:], 1<<3)   // OACS: namespace management
	binary.LittleEndian.PutUint64(ctrl[280:], 10<<30) // TNVMCAP 10 GiB
	c, err := parseIdentifyController(ctrl)
	if err != nil || !c.NamespaceManagement || c.TotalBytes != 10<<30 {
		t.Fatalf("controller %+v, %v", c, err)
	}
	allocated := map[uint32]NVMeNamespace{1: identify(0, 9, 4<<30), 2: identify(0, 9, 1<<30)}
	cases := map[string]struct {
		c           NVMeController
		active, ids []uint32
		want        []proto.HiddenCapacity
	}{
		"namespace 2 detached, 5 GiB in no namespace": {c, []uint32{1}, []uint32{1, 2}, []proto.HiddenCapacity{
			{Kind: proto.HiddenNVMeNamespace, NSID: 2, Bytes: 1 << 30}, {Kind: proto.HiddenNVMeUnallocated, Bytes: 5 << 30}}},
		"both attached, no TNVMCAP (qemu)":  {NVMeController{NamespaceManagement: true}, []uint32{1, 2}, []uint32{1, 2}, nil},
		"both attached, TNVMCAP all theirs": {NVMeController{NamespaceManagement: true, TotalBytes: 5 << 30}, []uint32{1, 2}, []uint32{1, 2}, nil},
	}
	for name, tc := range cases {
		if got := nvmeHidden(tc.c, tc.active, tc.ids, allocated); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", name, got, tc.want)
		}
	}
}

// TestATAHidden reads a Host Protected Area: READ NATIVE MAX ADDRESS EXT's registers as
// qemu 7.2's AHCI disk (64 MiB, 131072 sectors) returned them through SG_IO, its last LBA
// 131071 so no HPA, and the same device with 4096 sectors hidden.
func TestATAHidden(t *testing.T) {
	id := make([]byte, 512)
	put := func(w int, v uint16) { binary.LittleEndian.PutUint16(id[2*w:], v) }
	put(82, 0x4021) // qemu: no HPA feature set
	put(83, 0x7400) // 48-bit addresses
	put(100, 0)
	put(101, 2) // 131072 sectors
	s, err := parseATAIdentify(id)
	if err != nil || s.HostProtectedArea || !s.LBA48 || s.Sectors != 131072 || s.SectorSize != 512 {
		t.Fatalf("identify %+v, %v", s, err)
	}
	recorded := [32]byte{0x72, 0x01, 0x00, 0x1d, 0, 0, 0, 0x0e,
		0x09, 0x0c, 0x01, 0x00, 0x00, 0x00, 0x00, 0xff, 0x00, 0xff, 0x00, 0x01, 0x40, 0x50}
	last, ok := ataLBA(recorded, true)
	if !ok || last != 131071 {
		t.Fatalf("native max %d, %t", last, ok)
	}
	if h := ataHidden(s, last); h != nil {
		t.Errorf("no HPA: %+v", h)
	}
	// SET MAX ADDRESS EXT to 126976 sectors: IDENTIFY shows them, the native max stays.
	put(100, 126976&0xffff)
	put(101, 126976>>16)
	s, _ = parseATAIdentify(id)
	want := []proto.HiddenCapacity{{Kind: proto.HiddenATAHPA, Bytes: 4096 * 512}}
	if h := ataHidden(s, last); !reflect.DeepEqual(h, want) {
		t.Errorf("HPA of 4096 sectors: %+v, want %+v", h, want)
	}
	// A 28-bit device: LBA 27:24 in the device register.
	recorded[8+12] = 0x41
	if last, _ := ataLBA(recorded, false); last != 1<<24|131071 {
		t.Errorf("28-bit native max %d", last)
	}
}
