package vm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/testkit"
)

const (
	// wipeHelperEnv makes the test binary the site side of TestVMWipe.
	wipeHelperEnv = "BC_VM_WIPE_HELPER"
	// wipeDiskSize is each of the VM's disks.
	wipeDiskSize = 64 << 20
)

// wipeSpec is what TestVMWipe hands its helper: the disks' image files by transport.
type wipeSpec struct {
	Work, Ramdisk, QMP string
	Disks              map[string]string
}

// TestVMWipe boots the `make ramdisk` ramdisk on a qemu VM with an NVMe disk, a SATA
// disk on AHCI and a virtio disk, and runs disk.wipe in each mode through the registry:
// before each, every disk image holds known data; after it, the helper reads the images
// from the host. A disk the mode wiped reads what its method promises (quick: no data
// in the first and last MiB; an erase: the whole disk as the read-back expects), a disk
// the mode cannot wipe (qemu's SATA disk has no ATA security feature set; no emulated
// disk erases cryptographically) is reported unwiped and holds its data untouched, and
// the registry attests a wipe only when every disk was wiped and read back.
func TestVMWipe(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	ramdisk, work, lan, siteNS := vmSegment(t)
	qmpSock := filepath.Join(work, "vm.qmp")
	disks, console := startWipeVM(t, lan, work, qmpSock, wipeDiskSize)
	out := runHelper(t, siteNS, "TestVMWipeHelper", wipeHelperEnv, work, console,
		wipeSpec{Work: work, Ramdisk: ramdisk, QMP: qmpSock, Disks: disks}, 10*time.Minute)
	t.Logf("site side:\n%s", out)
}

// startWipeVM starts a VM held off (-S) with an NVMe disk, a SATA disk on AHCI and a
// virtio disk of size bytes each, backed by files in work (returned by transport), and
// returns them and the file its console goes to.
func startWipeVM(t testing.TB, lan *netns.LAN, work, qmpSock string, size int64) (disks map[string]string, console string) {
	disks = map[string]string{}
	for _, tr := range []string{"nvme", "sata", "virtio"} {
		disks[tr] = filepath.Join(work, tr+".raw")
		testkit.SparseFile(t, disks[tr], size)
	}
	drive := func(id, file string) string {
		return "file=" + file + ",if=none,id=" + id + ",format=raw,cache=unsafe,discard=unmap"
	}
	console = lan.StartVM(t, qmpSock, "-S", "-no-shutdown", "-m", "1024", "-uuid", vmUUID,
		"-device", "e1000,id=nic0,netdev=n0,romfile="+vmROM+",mac="+vmMAC,
		"-drive", drive("d0", disks["virtio"]), "-device", "virtio-blk-pci,id=disk0,drive=d0",
		"-drive", drive("n0", disks["nvme"]), "-device", "nvme,id=nvme0,serial=bcwipe0,drive=n0",
		"-drive", drive("s0", disks["sata"]), "-device", "ahci,id=ahci0", "-device", "ide-hd,id=sata0,drive=s0,bus=ahci0.0")
	return disks, console
}

// wipeProfile boots the ramdisk unless it runs already, and wipes in mode.
func wipeProfile(mode string) string {
	return fmt.Sprintf(`{"id": "wipe-%s", "version": 1, "target": "metal", "role": "host",
  "steps": [
    {"use": "metal.ensureRamdisk", "timeout": "5m"},
    {"use": "disk.wipe", "on": "ramdisk", "with": {"mode": %q}, "timeout": "5m"}]}`, mode, mode)
}

// pattern is the known data a disk holds before each wipe: every 4 KiB block differs.
func pattern(transport string) []byte {
	b := make([]byte, wipeDiskSize)
	for off := 0; off < len(b); off += 4096 {
		copy(b[off:off+4096], bytes.Repeat([]byte(fmt.Sprintf("%s block %08d ", transport, off/4096)), 4096/24+1))
	}
	return b
}

// TestVMWipeHelper is the site side of TestVMWipe, in the site's namespace: registry, bcd
// site, and the wipes.
func TestVMWipeHelper(t *testing.T) {
	var s wipeSpec
	work := helperSpec(t, wipeHelperEnv, &s)
	reg := testkit.StartRegistry(t, filepath.Join(work, "registry"), "--listen", siteIP+":7443", "--agent-listen", siteIP+":7444",
		"--hardware-profiles", hardwareProfiles(t, work))
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a")
	testkit.JSON(t, admin, nil, "pools", "create", "vms", "--site", "rack-a")
	stopSite := startSite(t, work, s.Ramdisk, reg)
	defer stopSite()

	var n struct{ ID string }
	testkit.JSON(t, admin, &n, "nodes", "enroll", "--pool", "vms", "--mac", vmMAC, "--product-uuid", vmUUID,
		"--bmc-driver", "qmp", "--bmc-address", s.QMP, "--hardware-profile", "lab-qemu")
	waitReady(t, admin, n.ID)
	for _, mode := range []string{proto.WipeQuick, proto.WipeSecureErase, proto.WipeCryptoErase} {
		for tr, file := range s.Disks {
			f, err := os.OpenFile(file, os.O_WRONLY, 0)
			if err == nil {
				_, err = f.WriteAt(pattern(tr), 0)
				f.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		// The first wipe is a deploy of a profile that wipes; the others are releases with
		// the mode, whose disk.wipe is steps[1] too. A release whose wipe is not attested
		// fails the node with UNVERIFIED_WIPE, which the next release (from failed) redoes.
		began := time.Now()
		var res testkit.Result
		if mode == proto.WipeQuick {
			writeFile(t, filepath.Join(work, "profile-"+mode+".json"), wipeProfile(mode))
			testkit.JSON(t, admin, nil, "profiles", "create", filepath.Join(work, "profile-"+mode+".json"))
			res = testkit.CLIShow(t, admin, os.Stdout, "nodes", "deploy", n.ID, "--profile", "wipe-"+mode, "--wait")
		} else {
			res = testkit.CLIShow(t, admin, os.Stdout, "nodes", "release", n.ID, "--wipe", mode, "--wait")
		}
		if res.Code != 0 && !strings.Contains(res.Stderr, "UNVERIFIED_WIPE") {
			t.Fatalf("wipe %s: exit %d\n%s", mode, res.Code, res.Stderr)
		}
		var node api.NodeView
		testkit.JSON(t, admin, &node, "nodes", "get", n.ID)
		var run api.WorkflowView
		testkit.JSON(t, admin, &run, "workflows", "get", node.Workflow)
		var w attest.Wipe
		if err := json.Unmarshal(run.Steps[1].Result, &w); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("WIPE %s in %s: attested %t (%s)\n", mode, time.Since(began).Round(time.Second), w.Attested, w.Reason)
		checkWipe(t, mode, w, s.Disks)
	}
	fmt.Println("HELPER-OK")
}

// checkWipe reads the disk images after a wipe in mode and checks them against what the
// registry stored.
func checkWipe(t *testing.T, mode string, w attest.Wipe, files map[string]string) {
	t.Helper()
	byTransport := map[string]proto.WipedDisk{}
	for _, d := range w.Disks {
		byTransport[d.Transport] = d
		rb := "-"
		if d.ReadBack != nil {
			rb = fmt.Sprintf("expect %s, %d random blocks, passed %t %s", d.ReadBack.Expect, d.ReadBack.Blocks, d.ReadBack.Passed, d.ReadBack.Failure)
		}
		fmt.Printf("  %-7s %-8s %-28s wiped %-5t %s; read-back %s; %s\n", d.Transport, d.Name, d.Method, d.Wiped, d.Unwiped, rb, d.Duration)
	}
	if len(byTransport) != 3 {
		t.Fatalf("%s: the wipe covered %d disks, want the NVMe, SATA and virtio disks: %+v", mode, len(w.Disks), w.Disks)
	}
	allWiped := true
	for tr, file := range files {
		d := byTransport[tr]
		img, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		before := pattern(tr)
		if !d.Wiped {
			allWiped = false
			if d.Unwiped == "" || d.ReadBack != nil || !bytes.Equal(img, before) {
				t.Errorf("%s %s: unwiped (%q) but the disk changed or no reason was given", mode, tr, d.Unwiped)
			}
			continue
		}
		if d.ReadBack == nil || !d.ReadBack.Passed {
			t.Errorf("%s %s: wiped but its read-back did not pass: %+v", mode, tr, d.ReadBack)
			continue
		}
		regions := [][2]int{{0, 1 << 20}, {wipeDiskSize - 1<<20, wipeDiskSize}}
		if mode != proto.WipeQuick {
			regions = [][2]int{{0, wipeDiskSize}}
		}
		for _, r := range regions {
			for off := r[0]; off < r[1]; off += 4096 {
				block := img[off : off+4096]
				ok := false
				switch d.ReadBack.Expect {
				case proto.ExpectZeroes:
					ok = bytes.Equal(block, make([]byte, 4096))
				case proto.ExpectOnes:
					ok = bytes.Equal(block, bytes.Repeat([]byte{0xff}, 4096))
				case proto.ExpectChanged:
					ok = !bytes.Equal(block, before[off:off+4096])
				}
				if !ok {
					t.Errorf("%s %s (%s): the block at %d does not read as %s", mode, tr, d.Method, off, d.ReadBack.Expect)
					break
				}
			}
		}
	}
	switch mode {
	case proto.WipeQuick:
		for tr, d := range byTransport {
			if !d.Wiped || d.Method != proto.WipeMethodSignatures {
				t.Errorf("quick did not wipe the %s disk: %+v", tr, d)
			}
		}
	case proto.WipeSecureErase:
		if d := byTransport["nvme"]; !d.Wiped || (d.Method != proto.WipeMethodNVMeFormatUserData && d.Method != proto.WipeMethodNVMeSanitizeBlock) {
			t.Errorf("secure-erase of the NVMe disk (qemu implements Format NVM): %+v", d)
		}
		if d := byTransport["sata"]; d.Wiped {
			t.Errorf("secure-erase of qemu's SATA disk, which has neither ATA security nor secure discard, says wiped: %+v", d)
		}
	case proto.WipeCryptoErase:
		for _, tr := range []string{"sata", "virtio"} {
			if d := byTransport[tr]; d.Wiped {
				t.Errorf("crypto-erase of the %s disk, which cannot erase cryptographically, says wiped: %+v", tr, d)
			}
		}
	}
	if w.Attested != allWiped {
		t.Errorf("%s: attested %t with every disk wiped %t (%s)", mode, w.Attested, allWiped, w.Reason)
	}
}
