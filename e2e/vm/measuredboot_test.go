package vm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
	"github.com/better-compute/better-compute/testkit/tpmboot"
)

// measuredHelperEnv makes the test binary the site side of TestVMMeasuredBoot.
const measuredHelperEnv = "BC_VM_MEASURED_HELPER"

// measuredSpec is what TestVMMeasuredBoot hands its helper.
type measuredSpec struct {
	Work, Ramdisk, QMP, Disk string
}

// TestVMMeasuredBoot deploys a q35 VM with OVMF and a software TPM (swtpm) three times,
// its pool's measured-boot policy tofu: OVMF measures the firmware, the NIC's iPXE ROM,
// iPXE and the ramdisk's kernel into the TPM. The first deploy enrolls the TPM (at
// inventory.refresh) and its verified boot becomes the node's baseline; the second,
// after a power cycle, matches it; the third boots another kernel (the same one with
// another PE time stamp, so its measurement differs) and is refused with
// measurement-mismatch before deploy.image is sent: the disk, wiped by the release before
// it, stays as it was.
func TestVMMeasuredBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	if _, err := os.Stat(ovmfCode); err != nil {
		t.Skipf("needs OVMF (ovmf): %v", err)
	}
	ramdisk, work, lan, siteNS := vmSegment(t)
	// The site serves a copy of the ramdisk, whose kernel the helper replaces.
	served := filepath.Join(work, "ramdisk")
	mkdir(t, served)
	for _, f := range []string{"vmlinuz", "initrd.img"} {
		copyFile(t, filepath.Join(ramdisk, f), filepath.Join(served, f), 0o644)
	}
	disk := filepath.Join(work, "disk.raw")
	testkit.SparseFile(t, disk, 64<<20)
	vars := disk + ".vars.fd"
	copyFile(t, ovmfVars, vars, 0o600)
	tpm := tpmboot.StartForVM(t)
	qmpSock := filepath.Join(work, "vm.qmp")
	console := lan.StartVM(t, qmpSock, "-S", "-no-shutdown", "-m", "1024", "-uuid", vmUUID, "-machine", "q35",
		"-drive", "if=pflash,format=raw,readonly=on,file="+ovmfCode, "-drive", "if=pflash,format=raw,file="+vars,
		"-chardev", "socket,id=chrtpm,path="+tpm.Ctrl, "-tpmdev", "emulator,id=tpm0,chardev=chrtpm", "-device", "tpm-crb,tpmdev=tpm0",
		"-drive", "file="+disk+",if=none,id=d0,format=raw,cache=unsafe", "-device", "virtio-blk-pci,id=disk0,drive=d0",
		"-device", "e1000,id=nic0,netdev=n0,romfile="+vmROM+",mac="+vmMAC)
	out := runHelper(t, siteNS, "TestVMMeasuredBootHelper", measuredHelperEnv, work, console,
		measuredSpec{Work: work, Ramdisk: served, QMP: qmpSock, Disk: disk}, 15*time.Minute)
	t.Logf("site side:\n%s", out)
}

// measuredProfile boots the ramdisk anew, refreshes the inventory (where the TPM is
// enrolled) and deploys a small image.
const measuredProfile = `{"id": "measured", "version": 1, "target": "metal", "role": "host",
  "image": {"ref": "blob@1", "format": "raw", "compression": "none"},
  "steps": [
    {"use": "boot.prepareRamdisk", "on": "site"},
    {"use": "management.setBootDevice", "on": "site", "with": {"device": "pxe"}},
    {"use": "power.setPower", "on": "site", "with": {"action": "cycle"}},
    {"use": "wait.agentJoined", "with": {"role": "ramdisk"}, "timeout": "5m"},
    {"use": "inventory.refresh", "on": "ramdisk", "timeout": "2m"},
    {"use": "deploy.deploy", "on": "ramdisk", "timeout": "3m"}],
  "cleanup": [{"use": "boot.cleanUp", "on": "site"}]}`

// TestVMMeasuredBootHelper is the site side of TestVMMeasuredBoot, in the site's
// namespace: the image's HTTPS source (the site caches the image, and the ramdisk reads
// it there), the registry, bcd site and the three deploys.
func TestVMMeasuredBootHelper(t *testing.T) {
	var s measuredSpec
	work := helperSpec(t, measuredHelperEnv, &s)
	blob := bytes.Repeat([]byte("measured boot "), 1<<16)
	certFile := filepath.Join(work, "images.pem")
	srv := testkit.ServeTLS(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		http.ServeContent(rw, r, "", time.Time{}, bytes.NewReader(blob))
	}), certFile)
	reg := testkit.StartRegistry(t, filepath.Join(work, "registry"), "--listen", siteIP+":7443", "--agent-listen", siteIP+":7444",
		"--hardware-profiles", hardwareProfiles(t, work))
	admin := reg.AdminConfig
	signer := openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "root", "--id", "platform", "--public-key", signer.PublicPath)
	testkit.RegisterImage(t, admin, testkit.Image{Tenant: "root", Ref: "blob@1", Kind: "os", Source: srv.URL + "/blob.raw",
		Format: "raw", Compression: "none", SHA256: testkit.Digest(blob), Size: int64(len(blob)), SignerID: "platform", Signer: signer}, nil)
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--image-sources", srv.Listener.Addr().String())
	policy := filepath.Join(work, "policy.json")
	writeFile(t, policy, `{"measuredBoot": {"mode": "tofu"}}`)
	testkit.JSON(t, admin, nil, "pools", "create", "vms", "--site", "rack-a", "--policy", policy, "--prewarm", "blob@1")
	t.Cleanup(startSite(t, work, s.Ramdisk, reg, "SSL_CERT_FILE="+certFile))
	waitCached(t, admin, testkit.Digest(blob))
	var n struct{ ID string }
	testkit.JSON(t, admin, &n, "nodes", "enroll", "--pool", "vms", "--mac", vmMAC, "--product-uuid", vmUUID,
		"--bmc-driver", "qmp", "--bmc-address", s.QMP, "--hardware-profile", "lab-qemu")
	waitReady(t, admin, n.ID)
	writeFile(t, filepath.Join(work, "profile.json"), measuredProfile)
	testkit.JSON(t, admin, nil, "profiles", "create", filepath.Join(work, "profile.json"))

	deploy := func(name string) (int, api.NodeView, api.NodeAttestation) {
		t.Helper()
		began := time.Now()
		res := testkit.CLIShow(t, admin, os.Stdout, "nodes", "deploy", n.ID, "--profile", "measured", "--wait")
		var node api.NodeView
		testkit.JSON(t, admin, &node, "nodes", "get", n.ID)
		var att api.NodeAttestation
		testkit.JSON(t, admin, &att, "nodes", "attestation", n.ID)
		verdict := "none"
		if att.LastBoot != nil {
			verdict = att.LastBoot.Verdict
		}
		fmt.Printf("%s: exit %d after %s, node %s, verdict %s\n", name, res.Code, time.Since(began).Round(time.Second), node.State, verdict)
		return res.Code, node, att
	}
	release := func(wipe string) {
		t.Helper()
		if res := testkit.CLIShow(t, admin, os.Stdout, "nodes", "release", n.ID, "--wipe", wipe, "--wait"); res.Code != 0 {
			t.Fatalf("nodes release: exit %d\n%s", res.Code, res.Stderr)
		}
	}

	code, node, att := deploy("FIRST")
	if code != 0 || !att.Enrolled || att.LastBoot == nil || att.LastBoot.Verdict != proto.VerdictBaseline || att.Baseline == nil {
		t.Fatalf("the first boot: node %s %+v, attestation %+v", node.State, node.Failure, att)
	}
	kernel := -1
	for _, e := range att.LastBoot.Events {
		fmt.Printf("  PCR %d %s %s %s\n", e.PCR, e.Type, e.SHA256[:16], e.Description)
		if e.PCR == 4 && e.Type == "EV_EFI_BOOT_SERVICES_APPLICATION" {
			kernel++
		}
	}
	if kernel < 1 {
		t.Fatalf("the verified boot has no boot loader and kernel in PCR 4: %+v", att.LastBoot.Events)
	}
	fmt.Printf("  secure boot %+v\n", att.LastBoot.SecureBoot)
	release("quick")

	if code, node, att = deploy("SECOND"); code != 0 || att.LastBoot.Verdict != proto.VerdictMatch {
		t.Fatalf("the second boot: node %s %+v, attestation %+v", node.State, node.Failure, att.LastBoot)
	}
	release("quick")

	// Another kernel: the same with another PE time stamp, which the firmware's
	// measurement of it covers.
	restamp(t, filepath.Join(s.Ramdisk, "vmlinuz"))
	before := fileDigest(t, s.Disk)
	code, node, att = deploy("THIRD")
	if code == 0 || node.Failure == nil || node.Failure.Error.Code != proto.DriverError || node.Failure.Error.Details.Reason != proto.ReasonMeasurementMismatch ||
		!strings.Contains(node.Failure.Error.Message, "new event EV_EFI_BOOT_SERVICES_APPLICATION") {
		t.Fatalf("another kernel: exit %d, node %s %+v", code, node.State, node.Failure)
	}
	fmt.Printf("REFUSED: %s\n", node.Failure.Error.Message)
	var run api.WorkflowView
	testkit.JSON(t, admin, &run, "workflows", "get", node.Workflow)
	for _, step := range run.Steps {
		if step.Use == proto.StepDeploy && len(step.Result) > 0 && string(step.Result) != "null" {
			t.Fatalf("deploy.deploy has a result: %s", step.Result)
		}
	}
	if after := fileDigest(t, s.Disk); after != before {
		t.Fatal("the disk changed though the boot was refused before deploy.image")
	}
	if att.LastBoot.Verdict != proto.VerdictMismatch {
		t.Fatalf("the refused boot's verdict %s", att.LastBoot.Verdict)
	}
	fmt.Println("HELPER-OK")
}

// restamp changes the PE time stamp of the kernel at path (COFF header, 4 bytes after
// the PE signature's): the kernel still boots, but its Authenticode hash, which the
// firmware measures, is another.
func restamp(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pe := int(binary.LittleEndian.Uint32(b[0x3c:]))
	if pe+12 > len(b) || string(b[pe:pe+4]) != "PE\x00\x00" {
		t.Fatalf("%s is not a PE image", path)
	}
	binary.LittleEndian.PutUint32(b[pe+8:], binary.LittleEndian.Uint32(b[pe+8:])+1)
	writeFile(t, path, string(b))
}

func fileDigest(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
