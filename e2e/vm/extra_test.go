package vm

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/hardware/dcgm/dcgmtest"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
)

// extraHelperEnv makes the test binary the site side of TestVMRamdiskExtra.
const extraHelperEnv = "BC_VM_EXTRA_HELPER"

// extraMark is what the extra initrd's hook prints on the VM's console.
const extraMark = "BC-EXTRA-HOOK"

// TestVMRamdiskExtra boots the `make ramdisk` ramdisk on a qemu VM with an extra initrd
// a pool names (policy.ramdiskExtras): a signed catalog image of kind ramdisk, cached by
// the site and appended by the iPXE script. It stands in for the NVIDIA driver and DCGM,
// which this VM cannot run: it holds stand-in `dcgmi` and `nv-hostengine` scripts (the
// first prints a recorded `dcgmi diag -j` output) and a hook under /etc/ramdisk.d that
// presents qemu's VGA function as an NVIDIA GPU (its sysfs vendor file bind-mounted).
// The same profile runs diag.dcgm on the ramdisk twice: without the extra it answers
// UNSUPPORTED, reason no-gpu; with it (the pool updated, the failed run retried) it
// runs the stand-in DCGM, and the registry stores the signed, passing result.
func TestVMRamdiskExtra(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	ramdisk, work, lan, siteNS := vmSegment(t)
	disk := filepath.Join(work, "disk.raw")
	testkit.SparseFile(t, disk, 64<<20)
	qmpSock := filepath.Join(work, "vm.qmp")
	console := lan.StartVM(t, qmpSock, "-S", "-no-shutdown", "-m", "1024", "-uuid", vmUUID, "-vga", "std",
		"-drive", "file="+disk+",if=none,id=d0,format=raw,cache=unsafe", "-device", "virtio-blk-pci,id=disk0,drive=d0",
		"-device", "e1000,id=nic0,netdev=n0,romfile="+vmROM+",mac="+vmMAC)
	out := runHelper(t, siteNS, "TestVMRamdiskExtraHelper", extraHelperEnv, work, console,
		spec{Work: work, Ramdisk: ramdisk, QMP: qmpSock}, 10*time.Minute)
	b, err := os.ReadFile(console)
	if err != nil {
		t.Fatal(err)
	}
	// The first boot ran without the extra, the second with it: its hook ran once, in
	// the ramdisk, and found the stand-in dcgmi on the ramdisk's PATH.
	if n := strings.Count(string(b), extraMark+" "); n != 1 || !strings.Contains(string(b), extraMark+" dcgmi=/usr/bin/dcgmi") {
		t.Errorf("the console shows the extra initrd's hook %d times, want once with dcgmi on the PATH:\n%s", n, b)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, extraMark) {
			t.Logf("VM console: %s", line)
		}
	}
	t.Logf("site side:\n%s", out)
}

// extraInitrd is the stand-in extra initrd: /usr/bin/dcgmi (printing recorded),
// /usr/bin/nv-hostengine and the hook /etc/ramdisk.d/50-standin-gpu.
func extraInitrd(t *testing.T, recorded []byte) []byte {
	t.Helper()
	return cpioGz(t, map[string]string{
		"usr/share/standin/diag.json": string(recorded),
		"usr/bin/dcgmi": "#!/bin/sh\n" +
			`case "$*" in "diag -r 1 -j --host unix://"*) cat /usr/share/standin/diag.json;; *) echo "unexpected: $*" >&2; exit 2;; esac` + "\n",
		"usr/bin/nv-hostengine": "#!/bin/sh\n" +
			`while [ $# -gt 0 ]; do case "$1" in --domain-socket) sock="$2"; shift;; esac; shift; done` + "\n" +
			`trap 'rm -f "$sock"; exit 0' TERM` + "\n" +
			`touch "$sock"` + "\n" +
			"while :; do sleep 1; done\n",
		// Test only: qemu's std VGA (class 0x030000, vendor 0x1234) presented as NVIDIA's.
		"etc/ramdisk.d/50-standin-gpu": "#!/bin/sh\n" +
			"for dev in /sys/bus/pci/devices/*; do\n" +
			"\t[ \"$(cat \"$dev/class\")\" = 0x030000 ] || continue\n" +
			"\techo 0x10de >/run/standin-vendor\n" +
			"\tmount -o bind /run/standin-vendor \"$dev/vendor\"\n" +
			"\techo \"" + extraMark + " dcgmi=$(command -v dcgmi) gpu=${dev##*/} vendor=$(cat \"$dev/vendor\")\"\n" +
			"\tbreak\n" +
			"done\n",
	})
}

// cpioGz is a gzip-compressed newc archive of files (path: content), each executable,
// with their directories listed before them (the kernel makes no parent directory
// itself).
func cpioGz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		mkdir(t, filepath.Dir(path))
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", "-c", "find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0")
	cmd.Dir = dir
	var archive bytes.Buffer
	cmd.Stdout = &archive
	if err := cmd.Run(); err != nil {
		t.Fatalf("find | cpio: %v", err)
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(archive.Bytes())
	w.Close()
	return gz.Bytes()
}

// serveExtra serves an extra initrd over HTTPS on loopback until the test ends, and
// returns its URL, the server's host:port (the site's image source) and its certificate
// file (for bcd site's SSL_CERT_FILE).
func serveExtra(t *testing.T, work string, extra []byte) (url, host, certFile string) {
	t.Helper()
	certFile = filepath.Join(work, "images.pem")
	srv := testkit.ServeTLS(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		http.ServeContent(rw, r, "", time.Time{}, bytes.NewReader(extra))
	}), certFile)
	return srv.URL + "/extra.cpio.gz", srv.Listener.Addr().String(), certFile
}

// registerExtra registers the extra initrd at url as ref, kind ramdisk, signed by a
// new platform signer, and returns its digest.
func registerExtra(t *testing.T, reg *testkit.Registry, ref, url string, extra []byte) string {
	t.Helper()
	digest := testkit.Digest(extra)
	signer := openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, reg.AdminConfig, nil, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "root", "--id", "platform", "--public-key", signer.PublicPath)
	testkit.RegisterImage(t, reg.AdminConfig, testkit.Image{Tenant: "root", Ref: ref, Kind: "ramdisk", Source: url,
		Format: "raw", Compression: "none", SHA256: digest, Size: int64(len(extra)), SignerID: "platform", Signer: signer}, nil)
	return digest
}

// extraSite registers extra as ref (serveExtra, registerExtra), starts bcd site for site
// rack-a, whose image sources allow the extra's server, with pool vms (naming the extra
// in policy.ramdiskExtras when named is set), creates profile, and enrolls the VM (QMP
// at qmp) in the pool; it returns the admin's CLI config, the extra's digest and the
// ready node's id. A named extra is in the site's cache when it returns.
func extraSite(t *testing.T, work, ramdisk, qmp, ref string, extra []byte, named bool, profile string) (admin, digest, node string) {
	t.Helper()
	url, host, certFile := serveExtra(t, work, extra)
	reg := testkit.StartRegistry(t, filepath.Join(work, "registry"), "--listen", siteIP+":7443", "--agent-listen", siteIP+":7444",
		"--hardware-profiles", hardwareProfiles(t, work))
	admin = reg.AdminConfig
	digest = registerExtra(t, reg, ref, url, extra)
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--image-sources", host)
	policy := filepath.Join(work, "policy.json")
	writeFile(t, policy, "{}")
	if named {
		writeFile(t, policy, `{"ramdiskExtras": ["`+ref+`"]}`)
	}
	testkit.JSON(t, admin, nil, "pools", "create", "vms", "--site", "rack-a", "--policy", policy)
	t.Cleanup(startSite(t, work, ramdisk, reg, "SSL_CERT_FILE="+certFile))
	if named {
		waitCached(t, admin, digest)
	}
	var n struct{ ID string }
	testkit.JSON(t, admin, &n, "nodes", "enroll", "--pool", "vms", "--mac", vmMAC, "--product-uuid", vmUUID,
		"--bmc-driver", "qmp", "--bmc-address", qmp, "--hardware-profile", "lab-qemu")
	waitReady(t, admin, n.ID)
	writeFile(t, filepath.Join(work, "profile.json"), profile)
	testkit.JSON(t, admin, nil, "profiles", "create", filepath.Join(work, "profile.json"))
	return admin, digest, n.ID
}

// waitCached waits until site rack-a's cache holds digest.
func waitCached(t *testing.T, admin, digest string) {
	t.Helper()
	for end := time.Now().Add(90 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		out := testkit.CLI(t, admin, "sites", "locations", "rack-a", "--format", "json")
		if strings.Contains(out.Stdout, digest) && strings.Contains(out.Stdout, `"ready"`) {
			return
		}
	}
	t.Fatalf("the site cache never held %s", digest)
}

// dcgmProfile boots the ramdisk anew (so that its boot entry is made now, with the
// pool's extras) and runs diag.dcgm level 1 on it.
const dcgmProfile = `{"id": "ramdisk-dcgm", "version": 1, "target": "metal", "role": "host",
  "steps": [
    {"use": "boot.prepareRamdisk", "on": "site"},
    {"use": "management.setBootDevice", "on": "site", "with": {"device": "pxe"}},
    {"use": "power.setPower", "on": "site", "with": {"action": "cycle"}},
    {"use": "wait.agentJoined", "with": {"role": "ramdisk"}, "timeout": "4m"},
    {"use": "diag.dcgm", "on": "ramdisk", "with": {"level": 1}, "timeout": "2m"}],
  "cleanup": [{"use": "boot.cleanUp", "on": "site"}]}`

// TestVMRamdiskExtraHelper is the site side of TestVMRamdiskExtra, in the site's
// namespace: the extra initrd's HTTPS source, the registry, bcd site and the runs.
func TestVMRamdiskExtraHelper(t *testing.T) {
	var s spec
	work := helperSpec(t, extraHelperEnv, &s)
	recorded, err := os.ReadFile(dcgmtest.Recorded("dcgm4-pass.json"))
	if err != nil {
		t.Fatal(err)
	}
	admin, digest, id := extraSite(t, work, s.Ramdisk, s.QMP, "dcgm-standin@1", extraInitrd(t, recorded), false, dcgmProfile)

	// Without the extra: the ramdisk sees no GPU.
	began := time.Now()
	res := testkit.CLIShow(t, admin, os.Stdout, "nodes", "deploy", id, "--profile", "ramdisk-dcgm", "--wait")
	var node api.NodeView
	testkit.JSON(t, admin, &node, "nodes", "get", id)
	if res.Code == 0 || node.Failure == nil || node.Failure.Error.Code != proto.Unsupported || node.Failure.Error.Details.Reason != proto.ReasonNoGPU {
		t.Fatalf("diag.dcgm on the ramdisk without the extra: exit %d, node %s %+v\n%s", res.Code, node.State, node.Failure, res.Stderr)
	}
	fmt.Printf("WITHOUT the extra after %s: %s %s (%s)\n", time.Since(began).Round(time.Second), node.Failure.Error.Code, node.Failure.Error.Details.Reason, node.Failure.Error.Message)

	// The pool names the extra; the site caches it; the failed run, retried, boots with it.
	policy := filepath.Join(work, "policy.json")
	writeFile(t, policy, `{"ramdiskExtras": ["dcgm-standin@1"]}`)
	testkit.JSON(t, admin, nil, "pools", "update", "vms", "--policy", policy)
	waitCached(t, admin, digest)
	began = time.Now()
	res = testkit.CLIShow(t, admin, os.Stdout, "nodes", "retry", id, "--wait")
	testkit.JSON(t, admin, &node, "nodes", "get", id)
	if res.Code != 0 {
		t.Fatalf("diag.dcgm on the ramdisk with the extra: exit %d, node %s %+v\n%s", res.Code, node.State, node.Failure, res.Stderr)
	}
	var stored attest.DCGM
	err = stepResult(t, admin, id, proto.CommandDiagDCGM, &stored)
	if err != nil || !stored.Passed || len(stored.Tests) == 0 || stored.Attestation == nil {
		t.Fatalf("diag.dcgm stored %+v (%v)", stored, err)
	}
	fmt.Printf("WITH the extra after %s: diag.dcgm passed, %d tests on %d GPU results, signed\n", time.Since(began).Round(time.Second), len(stored.Tests), len(stored.Tests[0].Results))
	fmt.Println("HELPER-OK")
}
