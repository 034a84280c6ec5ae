package vm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

const (
	// wipeHelperEnv makes the test binary the site side of TestVMWipe.
	wipeHelperEnv = "BC_VM_WIPE_HELPER"
	// wipeDiskSize is each of the VM's disks.
	wipeDiskSize = 64 << 20
	// hiddenHelperEnv makes the test binary the site side of TestVMWipeHidden.
	hiddenHelperEnv = "BC_VM_WIPE_HIDDEN_HELPER"
	// detachedNamespace names the image of the NVMe namespace allocated but not attached
	// (startWipeVM's detached).
	detachedNamespace = "nvme-detached"
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
	wipeVM(t, "TestVMWipeHelper", wipeHelperEnv, false)
}

// wipeVM is a wipe test: it starts the VM of startWipeVM (detached: with a detached
// NVMe namespace) and runs the test's helper, the site side, with env.
func wipeVM(t *testing.T, helper, env string, detached bool) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	ramdisk, work, lan, siteNS := vmSegment(t)
	qmpSock := filepath.Join(work, "vm.qmp")
	disks, console := startWipeVM(t, lan, work, qmpSock, wipeDiskSize, detached)
	out := runHelper(t, siteNS, helper, env, work, console,
		wipeSpec{Work: work, Ramdisk: ramdisk, QMP: qmpSock, Disks: disks}, 10*time.Minute)
	t.Logf("site side:\n%s", out)
}

// startWipeVM starts a VM held off (-S) with an NVMe disk, a SATA disk on AHCI and a
// virtio disk of size bytes each, backed by files in work (returned by transport), and
// returns them and the file its console goes to. With detached, the NVMe controller is
// in an NVM subsystem whose second namespace, of size bytes too, is allocated but not
// attached to it (qemu's nvme-ns detached=true), backed by disks[detachedNamespace].
func startWipeVM(t testing.TB, lan *netns.LAN, work, qmpSock string, size int64, detached bool) (disks map[string]string, console string) {
	disks = map[string]string{}
	files := []string{"nvme", "sata", "virtio"}
	if detached {
		files = append(files, detachedNamespace)
	}
	for _, tr := range files {
		disks[tr] = filepath.Join(work, tr+".raw")
		testkit.SparseFile(t, disks[tr], size)
	}
	drive := func(id, file string) string {
		return "file=" + file + ",if=none,id=" + id + ",format=raw,cache=unsafe,discard=unmap"
	}
	nvme := []string{"-drive", drive("n0", disks["nvme"]), "-device", "nvme,id=nvme0,serial=bcwipe0,drive=n0"}
	if detached {
		nvme = []string{"-device", "nvme-subsys,id=subsys0,nqn=bcwipe",
			"-device", "nvme,id=nvme0,serial=bcwipe0,subsys=subsys0",
			"-drive", drive("n0", disks["nvme"]), "-device", "nvme-ns,drive=n0,bus=nvme0,nsid=1",
			"-drive", drive("n1", disks[detachedNamespace]), "-device", "nvme-ns,drive=n1,bus=nvme0,nsid=2,detached=true"}
	}
	args := append([]string{"-S", "-no-shutdown", "-m", "1024", "-uuid", vmUUID,
		"-device", "e1000,id=nic0,netdev=n0,romfile=" + vmROM + ",mac=" + vmMAC,
		"-drive", drive("d0", disks["virtio"]), "-device", "virtio-blk-pci,id=disk0,drive=d0"}, nvme...)
	args = append(args, "-drive", drive("s0", disks["sata"]), "-device", "ahci,id=ahci0", "-device", "ide-hd,id=sata0,drive=s0,bus=ahci0.0")
	return disks, lan.StartVM(t, qmpSock, args...)
}

// wipeNode starts the registry and bcd site of a wipe test's helper (stopped when the
// test ends) with pool vms at site rack-a, enrolls the VM (QMP at qmp) in it and returns
// the admin's CLI config and the ready node's id.
func wipeNode(t *testing.T, work, ramdisk, qmp string) (admin, node string) {
	t.Helper()
	reg := testkit.StartRegistry(t, filepath.Join(work, "registry"), "--listen", siteIP+":7443", "--agent-listen", siteIP+":7444",
		"--hardware-profiles", hardwareProfiles(t, work))
	admin = reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a")
	testkit.JSON(t, admin, nil, "pools", "create", "vms", "--site", "rack-a")
	t.Cleanup(startSite(t, work, ramdisk, reg))
	var n struct{ ID string }
	testkit.JSON(t, admin, &n, "nodes", "enroll", "--pool", "vms", "--mac", vmMAC, "--product-uuid", vmUUID,
		"--bmc-driver", "qmp", "--bmc-address", qmp, "--hardware-profile", "lab-qemu")
	waitReady(t, admin, n.ID)
	return admin, n.ID
}

// fillDisks writes the known data of pattern into every disk image.
func fillDisks(t *testing.T, disks map[string]string) {
	t.Helper()
	for tr, file := range disks {
		f, err := os.OpenFile(file, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteAt(pattern(tr), 0)
			f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// lastWipe is the stored result of the disk.wipe of node's last workflow, steps[1] of
// each wipe test's workflows.
func lastWipe(t *testing.T, admin, node string) attest.Wipe {
	t.Helper()
	var n api.NodeView
	testkit.JSON(t, admin, &n, "nodes", "get", node)
	var run api.WorkflowView
	testkit.JSON(t, admin, &run, "workflows", "get", n.Workflow)
	var w attest.Wipe
	if err := json.Unmarshal(run.Steps[1].Result, &w); err != nil {
		t.Fatal(err)
	}
	return w
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
	admin, node := wipeNode(t, work, s.Ramdisk, s.QMP)
	for _, mode := range []string{proto.WipeQuick, proto.WipeSecureErase, proto.WipeCryptoErase} {
		fillDisks(t, s.Disks)
		// The first wipe is a deploy of a profile that wipes; the others are releases with
		// the mode, whose disk.wipe is steps[1] too. A release whose wipe is not attested
		// fails the node with UNVERIFIED_WIPE, which the next release (from failed) redoes.
		began := time.Now()
		var res testkit.Result
		if mode == proto.WipeQuick {
			writeFile(t, filepath.Join(work, "profile-"+mode+".json"), wipeProfile(mode))
			testkit.JSON(t, admin, nil, "profiles", "create", filepath.Join(work, "profile-"+mode+".json"))
			res = testkit.CLIShow(t, admin, os.Stdout, "nodes", "deploy", node, "--profile", "wipe-"+mode, "--wait")
		} else {
			res = testkit.CLIShow(t, admin, os.Stdout, "nodes", "release", node, "--wipe", mode, "--wait")
		}
		if res.Code != 0 && !strings.Contains(res.Stderr, "UNVERIFIED_WIPE") {
			t.Fatalf("wipe %s: exit %d\n%s", mode, res.Code, res.Stderr)
		}
		w := lastWipe(t, admin, node)
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

// TestVMWipeHidden boots the `make ramdisk` ramdisk on a qemu VM whose NVMe controller,
// in an NVM subsystem, has a second namespace allocated but not attached to it, holding
// an earlier tenant's data no block device shows, beside a SATA disk on AHCI and a
// virtio disk, and wipes through the registry: a deploy of a profile that wipes quick,
// then a release with a quick wipe. Each wipe reports the detached namespace as the
// NVMe disk's hidden capacity (namespace 2, its 64 MiB), the SATA disk none (qemu's
// READ NATIVE MAX ADDRESS EXT answers its current max: no HPA), the registry does not
// attest it though every disk was wiped and read back, and the release fails the node
// with UNVERIFIED_WIPE; the namespace's data is still there after both.
func TestVMWipeHidden(t *testing.T) {
	wipeVM(t, "TestVMWipeHiddenHelper", hiddenHelperEnv, true)
}

// TestVMWipeHiddenHelper is the site side of TestVMWipeHidden, in the site's namespace.
func TestVMWipeHiddenHelper(t *testing.T) {
	var s wipeSpec
	work := helperSpec(t, hiddenHelperEnv, &s)
	admin, node := wipeNode(t, work, s.Ramdisk, s.QMP)
	fillDisks(t, s.Disks)
	writeFile(t, filepath.Join(work, "profile.json"), wipeProfile(proto.WipeQuick))
	testkit.JSON(t, admin, nil, "profiles", "create", filepath.Join(work, "profile.json"))
	wipes := [][]string{
		{"nodes", "deploy", node, "--profile", "wipe-" + proto.WipeQuick, "--wait"},
		{"nodes", "release", node, "--wipe", proto.WipeQuick, "--wait"},
	}
	for i, args := range wipes {
		res := testkit.CLIShow(t, admin, os.Stdout, args...)
		w := lastWipe(t, admin, node)
		fmt.Printf("WIPE %s: exit %d, attested %t (%s)\n", args[1], res.Code, w.Attested, w.Reason)
		want := map[string][]proto.HiddenCapacity{
			"nvme":   {{Kind: proto.HiddenNVMeNamespace, NSID: 2, Bytes: wipeDiskSize}},
			"sata":   nil,
			"virtio": nil,
		}
		for _, d := range w.Disks {
			fmt.Printf("  %-7s %-8s %-12s wiped %-5t hidden %+v\n", d.Transport, d.Name, d.Method, d.Wiped, d.Hidden)
			if !d.Wiped || d.ReadBack == nil || !d.ReadBack.Passed {
				t.Errorf("%s: the quick wipe of the %s disk did not pass: %+v", args[1], d.Transport, d)
			}
			if got, ok := want[d.Transport]; !ok || !reflect.DeepEqual(d.Hidden, got) {
				t.Errorf("%s: the %s disk's hidden capacity is %+v, want %+v", args[1], d.Transport, d.Hidden, got)
			}
			delete(want, d.Transport)
		}
		if len(want) != 0 {
			t.Errorf("%s: the wipe covered %+v, not the NVMe, SATA and virtio disks", args[1], w.Disks)
		}
		if w.Attested || !strings.Contains(w.Reason, fmt.Sprintf("%s 2 (%d bytes)", proto.HiddenNVMeNamespace, wipeDiskSize)) {
			t.Errorf("%s: attested %t (%s), want not attested for the detached namespace", args[1], w.Attested, w.Reason)
		}
		if i == 1 {
			var n api.NodeView
			testkit.JSON(t, admin, &n, "nodes", "get", node)
			if res.Code == 0 || n.State != store.NodeFailed || n.Failure == nil || n.Failure.Error == nil || n.Failure.Error.Code != proto.UnverifiedWipe {
				t.Errorf("the release whose wipe left the detached namespace: exit %d, node %s (%+v)\n%s", res.Code, n.State, n.Failure, res.Stderr)
			}
		}
		img, err := os.ReadFile(s.Disks[detachedNamespace])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(img, pattern(detachedNamespace)) {
			t.Errorf("%s: the detached namespace's data changed: the test no longer hides capacity from the wipe", args[1])
		}
	}
	fmt.Println("HELPER-OK")
}
