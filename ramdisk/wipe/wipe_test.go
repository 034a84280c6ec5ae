package wipe

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/ramdisk/disk"
	"github.com/better-compute/better-compute/ramdisk/mount"
)

// loopDisk is a loop device over a file of size bytes filled with a known pattern.
func loopDisk(t *testing.T, size int64) (Disk, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(path, bytes.Repeat([]byte("bc-wipe!"), int(size/8)), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	loop, err := mount.AttachLoop(f, 0, 0)
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { loop.Close() })
	return Disk{DiskInfo: proto.DiskInfo{Name: filepath.Base(loop.Path()), SizeBytes: size}, Path: loop.Path()}, path
}

// TestQuickWipe wipes a loop device whose every byte holds data and reads its backing
// file from outside: the first and last MiB and the btrfs mirror at 64 MiB are zero, so
// no signature is left, and the read-back says so.
func TestQuickWipe(t *testing.T) {
	const size = 80 << 20
	d, backing := loopDisk(t, size)
	var reports []proto.WipeProgress
	res := Run(t.Context(), []Disk{d}, Options{Mode: proto.WipeQuick, Progress: func(p proto.WipeProgress) { reports = append(reports, p) }})
	w := res.Disks[0]
	if !w.Wiped || w.Method != proto.WipeMethodSignatures || w.ReadBack == nil || !w.ReadBack.Passed || w.ReadBack.Expect != proto.ExpectZeroes {
		t.Fatalf("quick wipe: %+v %+v", w, w.ReadBack)
	}
	if !w.Discarded || w.Duration == "" || w.Bytes != 3<<20 {
		t.Errorf("a loop device discards, and 3 MiB were zeroed: %+v", w)
	}
	img, err := os.ReadFile(backing)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int64{{0, disk.MiB}, {size - disk.MiB, disk.MiB}, {64 << 20, disk.MiB}} {
		if !all(img[r[0]:r[0]+r[1]], 0) {
			t.Errorf("the MiB at %d still holds data", r[0])
		}
	}
	if last := reports[len(reports)-1]; last.Mode != proto.WipeQuick || last.Percent[d.Name] != 100 {
		t.Errorf("last progress %+v", last)
	}
}

// TestEraseModesNeverDowngrade: a loop device offers no secure erase and no
// cryptographic erase, so both modes report it unwiped, with the reason, and leave its
// data as it was (nothing weaker ran in their place).
func TestEraseModesNeverDowngrade(t *testing.T) {
	d, backing := loopDisk(t, 8<<20)
	for mode, reason := range map[string]string{proto.WipeSecureErase: "no secure discard", proto.WipeCryptoErase: "no cryptographic erase"} {
		w := Run(t.Context(), []Disk{d}, Options{Mode: mode}).Disks[0]
		if w.Wiped || w.Method != "" || w.ReadBack != nil || !strings.Contains(w.Unwiped, reason) {
			t.Errorf("%s: %+v; want unwiped (%s)", mode, w, reason)
		}
		img, _ := os.ReadFile(backing)
		if !bytes.Equal(img[:8], []byte("bc-wipe!")) {
			t.Fatalf("%s changed the disk it did not wipe", mode)
		}
	}
}

// TestReadBackCatchesData: a read-back finds a block that still holds what it held, and
// a zeroes read-back finds a block that is not zero.
func TestReadBackCatchesData(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "disk")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 4 << 20
	f.Write(bytes.Repeat([]byte{7}, size))
	p := readPlan(size, proto.WipeSecureErase, 8, 4096)
	before, err := p.sample(f)
	if err != nil {
		t.Fatal(err)
	}
	if rb := p.check(f, proto.ExpectChanged, before); rb.Passed || !strings.Contains(rb.Failure, "do not read as changed") {
		t.Errorf("unchanged data passed: %+v", rb)
	}
	if rb := p.check(f, proto.ExpectZeroes, before); rb.Passed {
		t.Errorf("data passed as zeroes: %+v", rb)
	}
	f.WriteAt(make([]byte, size), 0)
	if rb := p.check(f, proto.ExpectZeroes, before); !rb.Passed || rb.Blocks != 8 {
		t.Errorf("zeroes failed: %+v", rb)
	}
	if rb := p.check(f, proto.ExpectChanged, before); !rb.Passed {
		t.Errorf("zeroes failed as changed: %+v", rb)
	}
	f.WriteAt(bytes.Repeat([]byte{0xff}, size), 0)
	if rb := p.check(f, proto.ExpectOnes, before); !rb.Passed {
		t.Errorf("ones failed: %+v", rb)
	}
}

// TestSelect: the wipe covers the machine's disks and leaves out what is not one.
func TestSelect(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), 0o644)
	}
	link := func(target, rel string) {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	devs := root + "/sys/devices"
	for name, dev := range map[string]string{"nvme0n1": "pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1", "sda": "pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda",
		"vda": "pci0000:00/0000:00:05.0/virtio1/block/vda", "sdb": "pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/host2/target2:0:0/2:0:0:0/block/sdb",
		"sdc": "pci0000:00/0000:00:1f.2/ata2/host1/target1:0:0/1:0:0:0/block/sdc", "vdb": "pci0000:00/0000:00:06.0/virtio2/block/vdb",
		"sr0": "pci0000:00/0000:00:1f.2/ata3/host3/target3:0:0/3:0:0:0/block/sr0", "loop0": "virtual/block/loop0"} {
		write("sys/devices/"+dev+"/size", "131072")
		link(devs+"/"+dev, "sys/block/"+name)
		write("sys/devices/"+dev+"/removable", "0")
		write("sys/devices/"+dev+"/ro", "0")
	}
	link(devs+"/pci0000:00/0000:00:04.0/nvme/nvme0", "sys/devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1/device")
	write("sys/devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/vendor", "ATA     ")
	link(devs+"/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0", "sys/devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda/device")
	write("sys/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/host2/target2:0:0/2:0:0:0/block/sdb/removable", "1")
	write("sys/devices/pci0000:00/0000:00:06.0/virtio2/block/vdb/ro", "1")
	// sdc holds the mounted filesystem the ramdisk runs from, through its partition.
	write("sys/devices/pci0000:00/0000:00:1f.2/ata2/host1/target1:0:0/1:0:0:0/block/sdc/sdc1/partition", "1")
	link(devs+"/pci0000:00/0000:00:1f.2/ata2/host1/target1:0:0/1:0:0:0/block/sdc/sdc1", "sys/dev/block/8:33")
	write("proc/self/mountinfo", "22 1 8:33 / /run/media rw - vfat /dev/sdc1 rw\n25 1 0:21 / /proc rw - proc proc rw\n")

	var inv []proto.DiskInfo
	transports := map[string]string{"nvme0n1": "nvme", "sda": "sata", "sdb": "usb", "sdc": "sata", "sr0": "sata", "vda": "virtio", "vdb": "virtio"}
	for _, n := range []string{"loop0", "nvme0n1", "sda", "sdb", "sdc", "sr0", "vda", "vdb"} {
		inv = append(inv, proto.DiskInfo{Name: n, SizeBytes: 64 << 20, Transport: transports[n]})
	}
	disks, skipped := Select(root, "/dev", inv)
	got := map[string]Disk{}
	for _, d := range disks {
		got[d.Name] = d
	}
	if len(got) != 3 || got["nvme0n1"].Transport != "nvme" || got["nvme0n1"].Controller != "/dev/nvme0" ||
		got["sda"].Transport != "sata" || got["vda"].Transport != "virtio" || got["vda"].Path != "/dev/vda" {
		t.Errorf("selected %+v", disks)
	}
	reasons := map[string]string{}
	for _, s := range skipped {
		reasons[s.Name] = s.Reason
	}
	for name, want := range map[string]string{"loop0": "loop", "sr0": "optical", "sdb": "removable", "sdc": "mounted", "vdb": "read-only"} {
		if !strings.Contains(reasons[name], want) {
			t.Errorf("%s skipped for %q, want %q", name, reasons[name], want)
		}
	}
}

// TestNVMeIdentify reads Identify data as the NVMe base specification lays it out.
func TestNVMeIdentify(t *testing.T) {
	ctrl := make([]byte, 4096)
	binary.LittleEndian.PutUint16(ctrl[256:], 1<<1) // OACS: Format NVM
	binary.LittleEndian.PutUint32(ctrl[328:], 1<<1) // SANICAP: block erase
	ctrl[524] = 1 << 2                              // FNA: crypto erase
	c, err := parseIdentifyController(ctrl)
	if err != nil || !c.Format || !c.CryptoErase || !c.SanitizeBlock || c.SanitizeCrypto || c.FormatAllNamespaces {
		t.Errorf("controller %+v, %v", c, err)
	}
	ns := make([]byte, 4096)
	ns[26], ns[29], ns[33] = 0x12, 0x09, 0x09 // LBA format 2 with metadata in the LBA, PI type 1 first, DLFEAT reads zeroes
	n, err := parseIdentifyNamespace(ns)
	if err != nil || n.DeallocatedReads != proto.ExpectZeroes {
		t.Errorf("namespace %+v, %v", n, err)
	}
	// LBAF 2, MSET 1, PI 1, PIL 1, SES 1.
	if got, want := formatCdw10(n, nvmeSESUserData), uint32(2|1<<4|1<<5|1<<8|1<<9); got != want {
		t.Errorf("format CDW10 %#x, want %#x", got, want)
	}
	ns[33] = 2
	if n, _ := parseIdentifyNamespace(ns); n.DeallocatedReads != proto.ExpectOnes {
		t.Errorf("DLFEAT 2 reads %q", n.DeallocatedReads)
	}
	if _, err := parseIdentifyController(ctrl[:100]); err == nil {
		t.Error("a short identify parsed")
	}
}

// TestATAIdentify reads IDENTIFY DEVICE's security words (ACS-3) and builds the
// pass-through CDBs SAT-4 defines.
func TestATAIdentify(t *testing.T) {
	id := make([]byte, 512)
	put := func(w int, v uint16) { binary.LittleEndian.PutUint16(id[2*w:], v) }
	put(82, 1<<1)
	put(128, 1|1<<3) // supported, frozen
	put(89, 30)      // 60 minutes
	put(59, 1<<12|1<<13)
	s, err := parseATAIdentify(id)
	if err != nil || !s.Supported || !s.Frozen || s.Locked || s.Enabled || s.EraseTime.Minutes() != 60 || !s.CryptoScramble {
		t.Errorf("security %+v, %v", s, err)
	}
	cdb := ataCDB(ataPIOOut, ataEraseUnit, 0, 1, 0)
	if cdb[0] != 0x85 || cdb[1] != 5<<1|1 || cdb[2] != 0x06 || cdb[6] != 1 || cdb[14] != 0xf4 {
		t.Errorf("SECURITY ERASE UNIT CDB % x", cdb)
	}
	cdb = ataCDB(ataNonData, ataSanitize, ataCryptoScramble, 0, ataCryptoSignature)
	if cdb[4] != 0x11 || cdb[8] != 0x70 || cdb[10] != 0x79 || cdb[12] != 0x72 || cdb[7] != 0x43 {
		t.Errorf("CRYPTO SCRAMBLE CDB % x", cdb)
	}
	if b := passwordBlock("pw"); len(b) != 512 || string(b[2:4]) != "pw" || b[0] != 0 {
		t.Errorf("password block % x", b[:8])
	}
	var sense [32]byte
	sense[0], sense[8], sense[9] = 0x72, 0x09, 0x0c
	sense[8+4] = 0x40 // in progress
	sense[8+9], sense[8+7] = 0x80, 0x00
	if done, p, err := sanitizeState(sense); done || err != nil || p != 0.5 {
		t.Errorf("in progress: %v %v %v", done, p, err)
	}
	sense[8+4] = 0x80
	if done, _, err := sanitizeState(sense); !done || err != nil {
		t.Errorf("completed: %v %v", done, err)
	}
}

// TestCancelledWipe: a wipe whose step was cancelled before a disk's erase began leaves
// the disk as it was and reports it unwiped.
func TestCancelledWipe(t *testing.T) {
	d, backing := loopDisk(t, 8<<20)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	w := Run(ctx, []Disk{d}, Options{Mode: proto.WipeQuick}).Disks[0]
	if w.Wiped || w.Unwiped != "cancelled" {
		t.Errorf("cancelled: %+v", w)
	}
	img, _ := os.ReadFile(backing)
	if !bytes.Equal(img[:8], []byte("bc-wipe!")) {
		t.Errorf("a cancelled wipe changed the disk")
	}
}
