package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/bmc/qmp"
	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
)

const (
	vmMAC  = "52:54:00:12:34:57"
	vmUUID = "12345678-9abc-def0-1122-3344556677aa"
	// vmROM is the e1000 iPXE ROM of Debian's ipxe-qemu.
	vmROM = "/usr/lib/ipxe/qemu/efi-e1000.rom"
	// siteIP is the site's address on the provisioning segment; the registry listens
	// there too, in the site's namespace.
	siteIP = "10.78.0.1"
	// helperEnv makes the test binary the site side of TestVMDeploy, inside the site's
	// namespace: its value is the work directory.
	helperEnv = "BC_VM_HELPER"
	// showEnv, when set, shows the site side's progress as it comes (`make demo`).
	showEnv = "BC_E2E_SHOW"
	// cacheDir keeps the downloaded packages `make ramdisk` unpacks between runs.
	cacheDir = "/var/cache/better-compute-test"
	// ovmfCode and ovmfVars are the UEFI firmware of Debian's ovmf (4 MiB flash, no
	// Secure Boot) and its empty variable store, which each UEFI VM gets a copy of.
	ovmfCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	ovmfVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
)

// Firmware is what a VM test boots with.
const (
	// bios is SeaBIOS on qemu's pc machine.
	bios = "bios"
	// uefi is OVMF on qemu's q35 machine.
	uefi = "uefi"
	// secureBoot is OVMF with Secure Boot on and Microsoft's keys enrolled, on q35 with
	// SMM; its machines are in a pool with policy.secureBoot.
	secureBoot = "uefi-secureboot"
)

// loaders are the boot loaders buildOSImage installs, by the firmware that starts them,
// as the loader's kernel command line names them (bc.loader=).
var loaders = map[string]string{bios: "grub-pc", uefi: "grub-efi", secureBoot: "grub-efi"}

// reported is the firmware the written OS's init reports (firmware=), by the firmware.
var reported = map[string]string{bios: bios, uefi: uefi, secureBoot: uefi}

// spec is what the outer test hands its helper.
type spec struct {
	Work, Ramdisk, Image, QMP string
	RootStart, RootSize       int64
	// Firmware, when set, makes the deploy end with a power cycle through the VM's BMC
	// driver, after which the VM boots its written disk with this firmware alone; the
	// VM's serial console is written to Console.
	Firmware, Console string
	// Walk makes the deploy part of a walk through the lifecycle (TestVMLifecycle):
	// inspect and commission before it, release and retire after it, the outer test
	// reading the disk back at each mark the helper prints.
	Walk bool
}

// TestVMDeploy deploys a qemu VM end to end: `nodes deploy --wait` powers it on through
// QMP, it PXE-boots the `make ramdisk` ramdisk from bcd site, which writes the signed
// image from the site cache to its virtio disk, kexecs into the written OS, whose first
// boot runs the user data (`bcd join` with the provisioned token, then `bcd node`); the
// node ends active with its NodeSpec applied. Then the VM is power-cycled through its
// BMC driver and SeaBIOS boots the written disk (GRUB from its BIOS boot partition), whose
// bcd node connects to the registry again.
func TestVMDeploy(t *testing.T) { vmRun(t, false, bios) }

// TestVMDeployUEFI is TestVMDeploy on a q35 VM with OVMF: the e1000's iPXE ROM
// PXE-boots the ramdisk as an EFI program, and after the power cycle the firmware boots
// the written disk's fallback loader \EFI\BOOT\BOOTX64.EFI, with no boot entry written.
func TestVMDeployUEFI(t *testing.T) {
	if _, err := os.Stat(ovmfCode); err != nil {
		t.Skipf("needs OVMF (ovmf): %v", err)
	}
	vmRun(t, false, uefi)
}

// TestVMDeploySecureBoot is TestVMDeploy under UEFI Secure Boot (OVMF with Microsoft's
// keys), in a pool with policy.secureBoot: the firmware PXE-boots the signed chain the
// site serves (shim, Debian's network GRUB, the GRUB configuration the site makes for
// the machine), GRUB boots the ramdisk's signed kernel, which runs locked down; the
// ramdisk writes the image and boots it with kexec_file_load, the one kexec a
// locked-down kernel allows, for the image's kernel signed by Debian; after the power
// cycle the firmware boots the written disk's shim, GRUB and kernel.
func TestVMDeploySecureBoot(t *testing.T) {
	for _, f := range []string{ovmfSecureCode, ovmfMSVars} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("needs OVMF with Secure Boot (ovmf): %v", err)
		}
	}
	vmRun(t, false, secureBoot)
}

// TestVMLifecycle walks a qemu VM through its lifecycle with the same parts as
// TestVMDeploy: enroll, inspect, commission, deploy, release, retire, each through the
// CLI with --wait. The VM's disk is read back from the host after the deploy (the
// image), after the release (a quick wipe: its first and last MiB zero) and after the
// retire (qemu's virtio disk cannot crypto-erase: the disk is as the release left it, and
// the node records the unverified wipe).
func TestVMLifecycle(t *testing.T) { vmRun(t, true, bios) }

// vmRun runs a VM test on firmware: the deploy and the written disk's boot, or with walk
// the whole lifecycle.
func vmRun(t *testing.T, walk bool, firmware string) {
	if testing.Short() {
		t.Skip("boots a VM end to end")
	}
	netns.Require(t, "qemu-system-x86_64", "sgdisk", "mkfs.ext4", "zstd", "openssl", "cpio", "grub-mkimage", "mkfs.vfat", "mcopy")
	show := os.Getenv(showEnv) != ""
	if _, err := os.Stat(vmROM); err != nil {
		t.Skipf("needs qemu's iPXE ROMs (ipxe-qemu): %v", err)
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("needs busybox (busybox-static)")
	}
	if out, _ := exec.Command("ldd", busybox).CombinedOutput(); !strings.Contains(string(out), "not a dynamic") {
		t.Skip("needs a static busybox (busybox-static)")
	}
	began := time.Now()
	ramdisk := makeRamdisk(t)
	work := t.TempDir()
	image := filepath.Join(work, "os.raw")
	story("phase: Build the OS image: a raw disk with a GPT, GRUB, a Debian kernel, busybox and bcd, compressed with zstd")
	rootStart, rootSize := buildOSImage(t, image, ramdisk, testkit.Binary(t, "bcd"), busybox)
	run(t, "zstd", "-q", "-f", "-3", image, "-o", image+".zst")
	t.Logf("ramdisk and image ready after %s", time.Since(began).Round(time.Second))
	if raw, zst := fileSize(image), fileSize(image+".zst"); raw > 0 {
		story("   %s, %d MiB, compressed to %.1f MiB", filepath.Base(image), raw>>20, float64(zst)/(1<<20))
	}

	lan := netns.NewLAN(t)
	siteNS := netns.New(t, "site")
	lan.Attach(t, siteNS, "eth0", siteIP+"/24", "")
	disk := filepath.Join(work, "vm-disk.raw")
	testkit.SparseFile(t, disk, imageSize)
	qmpSock := filepath.Join(work, "vm.qmp")
	console := startVM(t, lan, qmpSock, disk, firmware)

	s := spec{Work: work, Ramdisk: ramdisk, Image: image, QMP: qmpSock, RootStart: rootStart, RootSize: rootSize, Walk: walk}
	if !walk {
		s.Firmware, s.Console = firmware, console
	}
	data, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(work, "helper.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	limit := 8 * time.Minute
	if walk {
		limit = 20 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	helper := siteNS.Command(ctx, os.Args[0], "-test.run=^TestVMHelper$", "-test.v", "-test.timeout="+limit.String())
	helper.Env = append(os.Environ(), helperEnv+"="+work)
	var out netns.SyncBuffer
	helper.Stdout, helper.Stderr = &out, &out
	if show {
		helper.Stdout = io.MultiWriter(&out, os.Stdout)
	}
	var released []byte
	if err = helper.Start(); err == nil {
		if walk {
			released = walkMarks(t, &out, work, disk, image, rootStart, rootSize)
		}
		err = helper.Wait()
	}
	b, _ := os.ReadFile(console)
	if err != nil || !strings.Contains(out.String(), "HELPER-OK") {
		t.Fatalf("the site side failed: %v\n%s\nVM console:\n%s", err, out.String(), b)
	}
	if !show {
		t.Logf("site side:\n%s", out.String())
	}
	markers := []string{"BC-OS-UP", "BC-OS-JOINED"}
	if s.Firmware != "" {
		markers = append(markers, "BC-OS-BOOTED-AGAIN firmware="+reported[firmware])
	}
	if firmware == secureBoot {
		// The ramdisk's kernel ran locked down, and the OS came up after it by kexec.
		locked, up := strings.Index(string(b), "Kernel is locked down from EFI Secure Boot"), strings.Index(string(b), "BC-OS-UP")
		if locked < 0 || up < locked || !strings.Contains(string(b), "secureboot: Secure boot enabled") {
			t.Errorf("the VM's console does not show the ramdisk's kernel locked down under Secure Boot before the OS came up:\n%s", b)
		}
	}
	for _, marker := range markers {
		if !strings.Contains(string(b), marker) {
			t.Errorf("the VM's console has no %q:\n%s", marker, b)
		}
	}

	if !walk {
		checkImage(t, disk, image, rootStart, rootSize)
		t.Logf("disk sha256 outside the root partition matches the image; the whole test took %s", time.Since(began).Round(time.Second))
		story("   read back from the host: the VM's disk holds the image byte for byte outside its root partition")
		return
	}
	// The retire's crypto-erase cannot be done by qemu's virtio disk: nothing changed it.
	retired, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	if testkit.Digest(retired) != testkit.Digest(released) {
		t.Errorf("the retire changed the disk, though its crypto-erase was reported impossible")
	}
	t.Logf("the lifecycle walk took %s", time.Since(began).Round(time.Second))
}

// checkImage checks that the VM's disk holds the image: byte for byte outside the root
// partition, whose file system took the first-boot files and is mounted by the running
// OS.
func checkImage(t *testing.T, disk, image string, rootStart, rootSize int64) {
	t.Helper()
	raw, err := os.ReadFile(image)
	if err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	if len(written) < len(raw) {
		t.Fatalf("the disk is %d bytes, the image %d", len(written), len(raw))
	}
	written = written[:len(raw)]
	if testkit.Digest(written[:rootStart]) != testkit.Digest(raw[:rootStart]) || testkit.Digest(written[rootStart+rootSize:]) != testkit.Digest(raw[rootStart+rootSize:]) {
		t.Errorf("the VM's disk does not hold the image outside its root partition")
	}
	if bytes.Equal(written[rootStart:rootStart+rootSize], make([]byte, rootSize)) {
		t.Errorf("the VM's root partition is empty")
	}
}

// walkMarks follows a walking helper: at DEPLOYED it checks the disk holds the image, at
// RELEASED that the quick wipe zeroed its first and last MiB, answering each with a file
// the helper waits for; it returns the disk as the release left it.
func walkMarks(t *testing.T, out *netns.SyncBuffer, work, disk, image string, rootStart, rootSize int64) []byte {
	t.Helper()
	mark := func(m string) bool {
		for end := time.Now().Add(6 * time.Minute); time.Now().Before(end); time.Sleep(time.Second) {
			if strings.Contains(out.String(), m) {
				return true
			}
			if strings.Contains(out.String(), "--- FAIL") {
				return false
			}
		}
		return false
	}
	if !mark("WALK-DEPLOYED") {
		return nil
	}
	checkImage(t, disk, image, rootStart, rootSize)
	writeFile(t, filepath.Join(work, "deploy-checked"), "")
	if !mark("WALK-RELEASED") {
		return nil
	}
	released, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(released[:1<<20], make([]byte, 1<<20)) || !bytes.Equal(released[len(released)-1<<20:], make([]byte, 1<<20)) {
		t.Errorf("after the release the disk's first or last MiB holds data")
	}
	writeFile(t, filepath.Join(work, "release-checked"), "")
	return released
}

// TestVMHelper is the site side of TestVMDeploy; it runs only as its helper, in the
// site's namespace: registry, image server, bcd site and the operator's CLI.
func TestVMHelper(t *testing.T) {
	work := os.Getenv(helperEnv)
	if work == "" {
		t.Skip("the helper of TestVMDeploy")
	}
	var s spec
	readSpec(t, filepath.Join(work, "helper.json"), &s)
	began := time.Now()
	zst, err := os.ReadFile(s.Image + ".zst")
	if err != nil {
		t.Fatal(err)
	}
	digest := testkit.Digest(zst)

	// The image's source: HTTPS from the namespace, trusted by bcd site.
	certFile := filepath.Join(work, "images.pem")
	srv := testkit.ServeTLS(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/vm-os.raw.zst" {
			http.NotFound(rw, r)
			return
		}
		http.ServeContent(rw, r, "", time.Time{}, bytes.NewReader(zst))
	}), certFile)

	// The registry, on the site's segment.
	regDir := filepath.Join(work, "registry")
	url := "https://" + siteIP + ":7443"
	udc := filepath.Join(work, "userdata.json")
	template := "#!/bin/sh\n" +
		"set -e\n" +
		"mkdir -p /etc/bcd\n" +
		"printf '%s' '{{joinToken}}' >/etc/bcd/join-token\n" +
		"chmod 0600 /etc/bcd/join-token\n" +
		"/usr/local/bin/bcd join --server '{{controlPlaneUrl}}' --token-file /etc/bcd/join-token --node-id '{{nodeId}}'" +
		" --serving-ca-pin '{{servingCaPin}}' --join-signing-pin '{{joinSigningPin}}' --join-encryption-pin '{{joinEncryptionPin}}'\n" +
		"echo BC-OS-JOINED\n" +
		"exec /usr/local/bin/bcd node\n"
	udcDoc, _ := json.Marshal(map[string]any{"controlPlaneUrl": url, "bcdUrl": "https://downloads.example/bcd",
		"bcdSha256": strings.Repeat("ab", 32), "templates": map[string]string{"vm-first-boot": template}})
	writeFile(t, udc, string(udcDoc))
	hwp := hardwareProfiles(t, work)
	regArgs := []string{"--listen", siteIP + ":7443", "--agent-listen", siteIP + ":7444", "--userdata-config", udc, "--hardware-profiles", hwp}
	story("phase: The site: the registry and bcd site in the site's network namespace, a signed image registered and pre-warmed into the site cache")
	reg := testkit.StartRegistry(t, regDir, regArgs...)
	admin := reg.AdminConfig
	story("   registry at %s", url)

	// The signed image, registered with its source and pre-warmed at the site.
	signer := openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", regDir, "--tenant", "root", "--id", "platform", "--public-key", signer.PublicPath)
	testkit.RegisterImage(t, admin, testkit.Image{Tenant: "root", Ref: "vm-os@1", Kind: "os", Source: srv.URL + "/vm-os.raw.zst",
		Format: "raw", Compression: "zstd", SHA256: digest, Size: int64(len(zst)), SignerID: "platform", Signer: signer}, nil)
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--image-sources", strings.TrimPrefix(srv.URL, "https://"))
	pool := []string{"pools", "create", "vms", "--site", "rack-a", "--prewarm", "vm-os@1"}
	if s.Firmware == secureBoot {
		writeFile(t, filepath.Join(work, "policy.json"), `{"secureBoot": true}`)
		pool = append(pool, "--policy", filepath.Join(work, "policy.json"))
	}
	testkit.JSON(t, admin, nil, pool...)
	story("   image vm-os@1 registered: %.1f MiB of zstd, sha256 %s..., signed by the platform's Ed25519 key; site rack-a, pool vms pre-warming it", float64(len(zst))/(1<<20), digest[:12])

	// bcd join --role site, then bcd site on the segment.
	stopSite := startSite(t, work, s.Ramdisk, reg, "SSL_CERT_FILE="+certFile)
	defer stopSite()
	story("   bcd site joined as rack-a with a single-use site token; it serves DHCP, TFTP and iPXE on the segment")

	// Wait until the site cache holds the image.
	ready := false
	for end := time.Now().Add(90 * time.Second); !ready && time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		res := testkit.CLI(t, admin, "sites", "locations", "rack-a", "--format", "json")
		ready = strings.Contains(res.Stdout, digest) && strings.Contains(res.Stdout, `"ready"`)
	}
	if !ready {
		t.Fatalf("the site cache never held the image")
	}
	fmt.Printf("PREWARMED after %s\n", time.Since(began).Round(time.Second))
	story("   the site cache holds vm-os@1, its digest checked, %s after the registry started", time.Since(began).Round(time.Second))

	// The VM, enrolled with its QMP socket as its BMC, deployed.
	writeFile(t, filepath.Join(work, "profile.json"), vmProfile)
	testkit.JSON(t, admin, nil, "profiles", "create", filepath.Join(work, "profile.json"))
	story("phase: Enroll the VM: its MAC, SMBIOS UUID and QMP socket as its BMC; the enrolment workflow reads the BMC through bcd site")
	var n struct{ ID string }
	testkit.JSON(t, admin, &n, "nodes", "enroll", "--pool", "vms", "--mac", vmMAC, "--product-uuid", vmUUID,
		"--bmc-driver", "qmp", "--bmc-address", s.QMP, "--hardware-profile", "lab-qemu")
	waitReady(t, admin, n.ID)
	story("   node %s is ready", n.ID)
	walk := func(want string, args ...string) {
		t.Helper()
		began := time.Now()
		res := testkit.CLIShow(t, admin, os.Stdout, append(append([]string{"nodes"}, args...), "--wait")...)
		fmt.Printf("%s exit %d after %s\n", strings.ToUpper(args[0]), res.Code, time.Since(began).Round(time.Second))
		if res.Code != 0 || !strings.Contains(res.Stdout, "; node "+n.ID+" is "+want) {
			t.Fatalf("nodes %s --wait: exit %d\n%s", args[0], res.Code, res.Stderr)
		}
	}
	if s.Walk {
		walk(store.NodeReady, "inspect", n.ID)
		walk(store.NodeReady, "commission", n.ID)
	}
	deployStart := time.Now()
	story("phase: Deploy: the VM PXE-boots the ramdisk, which streams the image from the site cache onto its disk and checks its digest, then kexecs into it; the OS joins with its single-use token and runs bcd node")
	story("   $ better-compute nodes deploy %s --profile vm-host --wait", n.ID)
	res := testkit.CLIShow(t, admin, io.MultiWriter(os.Stdout, &storyWriter{}), "nodes", "deploy", n.ID, "--profile", "vm-host", "--wait")
	fmt.Printf("DEPLOY exit %d after %s\n", res.Code, time.Since(deployStart).Round(time.Second))
	if res.Code != 0 || !strings.Contains(res.Stdout, "is active") {
		t.Fatalf("nodes deploy --wait: exit %d", res.Code)
	}
	// bcd node on the VM applies the NodeSpec the run's end set; its acknowledgement is
	// in the store, read with the registry stopped (one process opens a store).
	var node store.Node
	var status store.AgentStatus
	var nodeSpec proto.NodeSpec
	for try := 0; ; try++ {
		time.Sleep(3 * time.Second)
		reg.Stop()
		st, err := store.Open(regDir, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		err = st.View(func(tx *store.Tx) (err error) {
			if node, err = tx.Node(n.ID); err == nil {
				if nodeSpec, err = tx.NodeSpec(n.ID); err == nil {
					status, err = tx.AgentStatus(n.ID)
				}
			}
			return err
		})
		st.Close()
		if err != nil && proto.CodeOf(err) != proto.NotFound {
			t.Fatal(err)
		}
		if status.ObservedGeneration >= 1 && status.ObservedGeneration == nodeSpec.Generation || try == 3 {
			break
		}
		reg = testkit.StartRegistry(t, regDir, regArgs...) // bcd node reconnects and says what it applied
	}
	fmt.Printf("NODE %s state %s, NodeSpec generation %d, observed %d\n", node.ID, node.State, nodeSpec.Generation, status.ObservedGeneration)
	if node.State != store.NodeActive || status.ObservedGeneration < 1 || status.ObservedGeneration != nodeSpec.Generation {
		t.Fatalf("node %s is not active with its NodeSpec applied", n.ID)
	}
	story("   node %s is active; bcd node on it applied NodeSpec generation %d (the profile's sysctl unit)", node.ID, status.ObservedGeneration)
	// The generation bcd node acknowledged carries the profile's host section: the host
	// converger applied it for real in the VM's kernel (a failed unit withholds the ack).
	if len(nodeSpec.Host) != 1 || nodeSpec.Host[0].Unit != "sysctl" {
		t.Fatalf("the node's NodeSpec host section is %+v, want the profile's sysctl unit", nodeSpec.Host)
	}
	if s.Firmware != "" {
		diskBoot(t, s, regDir, regArgs, n.ID, nodeSpec.Generation)
	}
	if s.Walk {
		reg = testkit.StartRegistry(t, regDir, regArgs...)
		answered := func(mark, file string) {
			fmt.Println(mark)
			for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
				if _, err := os.Stat(filepath.Join(work, file)); err == nil {
					return
				}
			}
			t.Fatalf("the outer test never answered %s", mark)
		}
		answered("WALK-DEPLOYED", "deploy-checked")
		walk(store.NodeReady, "release", n.ID, "--wipe", "quick")
		answered("WALK-RELEASED", "release-checked")
		walk(store.NodeRetired, "retire", n.ID)
		testkit.JSON(t, admin, &node, "nodes", "get", n.ID)
		if node.IdentityRevokedAt.IsZero() || node.UnverifiedWipe == nil {
			t.Fatalf("the retired node: revoked %v, unverified wipe %+v", node.IdentityRevokedAt, node.UnverifiedWipe)
		}
		fmt.Printf("RETIRED with an unverified wipe: %s\n", node.UnverifiedWipe.Error.Message)
	}
	if keep := os.Getenv(keepEnv); keep != "" {
		reg.Stop()
		keepRegistry(t, regDir, hwp, keep)
	}
	fmt.Println("HELPER-OK")
}

// keepEnv, when set (by `make demo`), names a directory the helper leaves a copy of its
// registry's data directory in, with the hardware profiles, for `serve` to start on
// afterwards and show what the run made.
const keepEnv = "BC_E2E_KEEP"

// keepRegistry copies the stopped registry's data directory into keep, and the hardware
// profiles file as keep/hardware-profiles.json, where serve finds it.
func keepRegistry(t *testing.T, regDir, hwp, keep string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", regDir+"/.", keep).CombinedOutput(); err != nil {
		t.Fatalf("keep the registry: %v\n%s", err, out)
	}
	copyFile(t, hwp, filepath.Join(keep, "hardware-profiles.json"), 0o600)
}

// fileSize is the size of the file at path, 0 when it cannot be read.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// vmProfile deploys vm-os@1 with the custom first-boot template through the site, the
// ramdisk and kexec; timeouts fit a TCG VM.
const vmProfile = `{"id": "vm-host", "version": 1, "target": "metal", "role": "host",
  "image": {"ref": "vm-os@1", "format": "raw", "compression": "zstd"},
  "userData": {"kind": "cloud-init", "template": "vm-first-boot"},
  "hostConfig": {"sysctl": {"net.ipv4.ip_forward": 1, "vm.swappiness": 10}},
  "steps": [
    {"use": "userdata.render"},
    {"use": "boot.prepareRamdisk", "on": "site"},
    {"use": "management.setBootDevice", "on": "site", "with": {"device": "pxe"}},
    {"use": "power.setPower", "on": "site", "with": {"action": "cycle"}},
    {"use": "wait.agentJoined", "with": {"role": "ramdisk"}, "timeout": "4m"},
    {"use": "inventory.refresh", "on": "ramdisk", "timeout": "1m"},
    {"use": "deploy.deploy", "on": "ramdisk", "timeout": "3m"},
    {"use": "management.setBootDevice", "on": "site", "with": {"device": "disk", "persistent": true}},
    {"use": "boot.kexec", "on": "ramdisk", "await": "rejoin", "timeout": "4m"}],
  "cleanup": [{"use": "boot.cleanUp", "on": "site"}]}`

// builtRamdisk is the ramdisk a test of this run built already, so the next one does
// not build it again.
var builtRamdisk struct {
	sync.Mutex
	dir string
}

// makeRamdisk runs `make ramdisk` (its packages cached under cacheDir) once per run and
// returns the directory holding vmlinuz and initrd.img; BC_E2E_RAMDISK names one already
// built.
func makeRamdisk(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv("BC_E2E_RAMDISK"); dir != "" {
		return dir // a ramdisk built already, from this tree
	}
	builtRamdisk.Lock()
	defer builtRamdisk.Unlock()
	if builtRamdisk.dir != "" {
		return builtRamdisk.dir
	}
	for _, tool := range []string{"apt-get", "dpkg-deb", "depmod", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s to build the ramdisk", tool)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("./scripts/make-ramdisk.sh")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "RAMDISK_CACHE="+cacheDir+"/ramdisk-debs")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make ramdisk: %v\n%s", err, out)
	}
	builtRamdisk.dir = filepath.Join(root, "out/ramdisk")
	return builtRamdisk.dir
}

// startVM starts a VM held off (-S) on firmware: an e1000 NIC (nic0) on the segment with
// qemu's iPXE ROM, a virtio disk (disk0) backed by disk, its QMP socket at qmpSock; it
// returns the file its serial console goes to. A UEFI VM is a q35 machine with OVMF and
// a variable store of its own next to disk. A Secure Boot VM's NIC is virtio-net without
// an option ROM, driven by OVMF's own driver: the e1000's iPXE ROM would boot iPXE
// itself (OVMF lets option ROMs run), not the firmware's PXE and the signed chain.
func startVM(t *testing.T, lan *netns.LAN, qmpSock, disk, firmware string) string {
	t.Helper()
	args := []string{"-S", "-no-shutdown", "-m", "1024", "-uuid", vmUUID,
		"-drive", "file=" + disk + ",if=none,id=d0,format=raw,cache=unsafe", "-device", "virtio-blk-pci,id=disk0,drive=d0"}
	if firmware == secureBoot {
		args = append(args, "-device", "virtio-net-pci,id=nic0,netdev=n0,romfile=,mac="+vmMAC)
	} else {
		args = append(args, "-device", "e1000,id=nic0,netdev=n0,romfile="+vmROM+",mac="+vmMAC)
	}
	code, varsTemplate := ovmfCode, ovmfVars
	switch firmware {
	case uefi:
		args = append(args, "-machine", "q35")
	case secureBoot:
		code, varsTemplate = ovmfSecureCode, ovmfMSVars
		args = append(args, "-machine", "q35,smm=on", "-global", "driver=cfi.pflash01,property=secure,value=on")
	}
	if firmware != bios {
		vars := disk + ".vars.fd"
		copyFile(t, varsTemplate, vars, 0o600)
		args = append(args, "-drive", "if=pflash,format=raw,readonly=on,file="+code, "-drive", "if=pflash,format=raw,file="+vars)
	}
	return lan.StartVM(t, qmpSock, args...)
}

// diskBoot power-cycles the deployed VM through its BMC driver (qmp, as bcd site opens
// it) and checks that it boots its written disk by its firmware alone: the OS's init
// reports the firmware and the loader that started it (the deploy's kexec starts no
// loader), and its bcd node connects to the registry again. The registry is stopped
// when diskBoot starts and ends: it forgets what the agent applied before the cycle and
// starts after it, so only the agent of the booted disk can report it again.
func diskBoot(t *testing.T, s spec, regDir string, regArgs []string, node string, generation int64) {
	t.Helper()
	began := time.Now()
	st, err := store.Open(regDir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Update(func(tx *store.Tx) error { return tx.RecordObservedGeneration(node, 0) })
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	d, err := qmp.Open(ctx, bmc.Config{Address: s.QMP, Options: map[string]string{"nic": "nic0", "disk": "disk0"}}, bmc.Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	story("phase: Boot the written disk: a power cycle through the VM's BMC driver; the firmware boots GRUB from the disk, whose bcd node reports to the registry again")
	if err := d.SetPower(ctx, proto.PowerActionCycle); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("BC-OS-BOOTED-AGAIN firmware=%s cmdline: BOOT_IMAGE=/boot/vmlinuz console=ttyS0 panic=-1 bc.loader=%s", reported[s.Firmware], loaders[s.Firmware])
	booted := false
	for ; !booted && ctx.Err() == nil; time.Sleep(time.Second) {
		b, _ := os.ReadFile(s.Console)
		booted = strings.Contains(string(b), want)
	}
	if !booted {
		t.Fatalf("after the power cycle the VM's console never showed %q", want)
	}
	fmt.Printf("DISK-BOOTED (%s) after %s\n", s.Firmware, time.Since(began).Round(time.Second))
	story("   the VM booted its disk by its firmware (%s, GRUB) after %s", s.Firmware, time.Since(began).Round(time.Second))
	reg := testkit.StartRegistry(t, regDir, regArgs...)
	defer reg.Stop()
	var n api.NodeView
	for ctx.Err() == nil {
		if testkit.JSON(t, reg.AdminConfig, &n, "nodes", "get", node); n.Agent != nil && n.Agent.ObservedGeneration == generation {
			fmt.Printf("REJOINED: bcd node on the booted disk reports generation %d after %s\n", generation, time.Since(began).Round(time.Second))
			story("   bcd node on the booted disk is back and reports generation %d", generation)
			return
		}
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("bcd node on the booted disk never reported the NodeSpec it applied: %+v", n.Agent)
}

// waitReady waits until the node's enrollment (metal-enroll, through bcd site and the
// VM's QMP socket) has made it ready.
func waitReady(t *testing.T, admin, node string) {
	t.Helper()
	var n store.Node
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if testkit.JSON(t, admin, &n, "nodes", "get", node); n.State == store.NodeReady {
			return
		} else if n.State == store.NodeFailed {
			break
		}
	}
	t.Fatalf("node %s is %s (%+v), never ready", node, n.State, n.Failure)
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	testkit.WriteFile(t, path, []byte(content), 0o600)
}

// hardwareProfiles writes the hardware profile lab-qemu (the qmp driver, with the VM's
// NIC nic0 and disk disk0) into work and returns its path, for serve --hardware-profiles.
func hardwareProfiles(t *testing.T, work string) string {
	hwp := filepath.Join(work, "hardware-profiles.json")
	qmpConfig := map[string]any{"options": map[string]string{"nic": "nic0", "disk": "disk0", "pollInterval": "100ms"}}
	hwpDoc, _ := json.Marshal(map[string]any{"version": 1, "hardwareProfiles": map[string]any{
		"lab-qemu": map[string]any{"drivers": map[string]any{
			"power": map[string]any{"driver": "qmp", "config": qmpConfig}, "management": map[string]any{"driver": "qmp", "config": qmpConfig}}}}})
	writeFile(t, hwp, string(hwpDoc))
	return hwp
}

// startSite joins a site agent for site rack-a (which must exist) and runs bcd site on
// the segment, serving the ramdisk in ramdiskDir, with env added to its environment. The
// function it returns stops it, showing its log and the registry's if the test failed.
func startSite(t *testing.T, work, ramdiskDir string, reg *testkit.Registry, env ...string) (stop func()) {
	confDir := testkit.JoinSite(t, reg, "rack-a")
	signed := netns.CachedLoaders() // the signed chain, for machines under Secure Boot
	siteConf, _ := json.Marshal(map[string]any{
		"version": 1, "configDir": confDir, "stateDir": filepath.Join(work, "site-state"),
		"boot": map[string]any{"interface": "eth0", "mode": "authoritative", "serverIP": siteIP,
			"subnet": "10.78.0.0/24", "range": map[string]string{"start": "10.78.0.100", "end": "10.78.0.150"},
			"leaseFile": filepath.Join(work, "leases.db"), "ramdiskDir": ramdiskDir, "retryInterval": "2s",
			"shimFile": signed.Shim, "grubFile": signed.NetGRUB},
		"ramdisk": map[string]any{"args": []string{"console=ttyS0", "panic=-1"}},
		"cache":   map[string]any{"dir": filepath.Join(work, "site-cache")},
	})
	siteConfig := filepath.Join(work, "site.json")
	writeFile(t, siteConfig, string(siteConf))
	stopSite := testkit.StartBCD(t, env, "site", "--config", siteConfig)
	return func() {
		stopSite()
		if t.Failed() {
			t.Logf("registry:\n%s", reg.Stderr)
		}
	}
}

// runHelper hands s to the test binary's helper test (work/spec.json), runs it in ns with
// env set to work, within timeout, and returns its output; it fails the test, showing
// the VM's console, unless the helper printed HELPER-OK.
func runHelper(t testing.TB, ns *netns.NS, test, env, work, console string, s any, timeout time.Duration) string {
	t.Helper()
	data, _ := json.Marshal(s)
	writeFile(t, filepath.Join(work, "spec.json"), string(data))
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	helper := ns.Command(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.timeout="+timeout.String())
	helper.Env = append(os.Environ(), env+"="+work)
	var out netns.SyncBuffer
	helper.Stdout, helper.Stderr = &out, &out
	if os.Getenv(showEnv) != "" {
		helper.Stdout = io.MultiWriter(&out, os.Stdout)
	}
	if err := helper.Run(); err != nil || !strings.Contains(out.String(), "HELPER-OK") {
		c, _ := os.ReadFile(console)
		t.Fatalf("the site side failed: %v\n%s\nVM console:\n%s", err, out.String(), c)
	}
	return out.String()
}

// vmSegment is what a VM test needs first (it skips without qemu, cpio or qemu's iPXE
// ROMs): the ramdisk, a work directory, the provisioning segment and the site's
// namespace on it at siteIP.
func vmSegment(t testing.TB) (ramdisk, work string, lan *netns.LAN, siteNS *netns.NS) {
	t.Helper()
	netns.Require(t, "qemu-system-x86_64", "cpio")
	if _, err := os.Stat(vmROM); err != nil {
		t.Skipf("needs qemu's iPXE ROMs (ipxe-qemu): %v", err)
	}
	ramdisk = makeRamdisk(t)
	work = t.TempDir()
	lan = netns.NewLAN(t)
	siteNS = netns.New(t, "site")
	lan.Attach(t, siteNS, "eth0", siteIP+"/24", "")
	return ramdisk, work, lan, siteNS
}

// helperSpec is the start of a helper test: it skips unless env names the work
// directory runHelper handed it, reads the spec there into v and returns the directory.
func helperSpec(t *testing.T, env string, v any) string {
	t.Helper()
	work := os.Getenv(env)
	if work == "" {
		t.Skip("a helper of another test, which runs it")
	}
	readSpec(t, filepath.Join(work, "spec.json"), v)
	return work
}

// readSpec reads what the outer test handed its helper from file into v.
func readSpec(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err == nil {
		err = json.Unmarshal(data, v)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// stepResult decodes into v the result of the step of node's last workflow that uses
// use (the last such step).
func stepResult(t *testing.T, admin, node, use string, v any) error {
	t.Helper()
	var n api.NodeView
	testkit.JSON(t, admin, &n, "nodes", "get", node)
	var run api.WorkflowView
	testkit.JSON(t, admin, &run, "workflows", "get", n.Workflow)
	err := fmt.Errorf("workflow %s has no %s step", n.Workflow, use)
	for _, step := range run.Steps {
		if step.Use == use {
			err = json.Unmarshal(step.Result, v)
		}
	}
	return err
}
