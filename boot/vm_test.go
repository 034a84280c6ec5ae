package boot

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/boot/grub"
	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/testkit"
)

const (
	vmMAC = "52:54:00:12:34:56"
	// vmROM is the e1000 iPXE ROM of Debian's ipxe-qemu.
	vmROM  = "/usr/lib/ipxe/qemu/efi-e1000.rom"
	vmUUID = "12345678-9abc-def0-1122-334455667788"
	// marker starts the line of the test ramdisk's /init on the serial console, and
	// endMarker the line after it, which gives its length.
	marker    = "BC-RAMDISK-UP cmdline: "
	endMarker = "BC-RAMDISK-END "
)

// TestVMBootsRamdisk PXE-boots a qemu VM (TCG, its built-in iPXE ROM, a tap device on
// the test segment) from the boot server alone into the test ramdisk, and reads the
// ramdisk's console line. In authoritative mode the VM starts without an entry: it is
// discovered, waits, and boots once the test gives it one, as a machine does while
// metal.ensureRamdisk waits for its MAC to be confirmed. In proxy mode dnsmasq hands out
// the address and the boot server only the boot information.
func TestVMBootsRamdisk(t *testing.T) {
	netns.Require(t, "qemu-system-x86_64", "dnsmasq")
	if _, err := os.Stat(vmROM); err != nil {
		t.Skipf("needs qemu's iPXE ROMs (ipxe-qemu): %v", err)
	}
	dir := testkit.RamdiskImage(t)
	entry := map[string]Entry{vmMAC: {Kind: KindRamdisk, Ramdisk: Ramdisk{Kernel: "vmlinuz", Initrd: "initrd.img",
		Token: "rt_vm", Registry: "https://registry.test:7443", Pins: []string{"sha256/AAAA", "sha256/BBBB", "sha256/CCCC"},
		Args: []string{"console=ttyS0", "panic=-1"}}}}
	for _, mode := range []Mode{Authoritative, Proxy} {
		t.Run(string(mode), func(t *testing.T) {
			n := newTestNet(t)
			cfg := netConfig(t, mode)
			cfg.RamdiskDir = dir
			cfg.RetryInterval = Duration(2 * time.Second)
			var srv *bootServer
			if mode == Proxy {
				startDnsmasq(t, n)
				srv = startServer(t, n.server, cfg, entry)
			} else {
				srv = startServer(t, n.server, cfg, nil)
			}
			console := startVM(t, n)
			start := time.Now()
			if mode == Authoritative {
				testkit.WaitFor(t, "the VM's discovery", 120*time.Second, 250*time.Millisecond, func() bool { return len(srv.Discoveries(t)) > 0 })
				d := srv.Discoveries(t)[0]
				t.Logf("discovered after %s: MAC %s, UUID %s (qemu -uuid %s), arch %d", time.Since(start).Round(time.Second), d.MAC, d.UUID, vmUUID, d.Arch)
				if d.MAC.String() != vmMAC || !d.HasArch || d.Arch != 0 || d.UUID != vmUUID {
					t.Errorf("discovery %+v: want MAC %s, arch 0 and UUID %s", d, vmMAC, vmUUID)
				}
				// The VM's lease, once acknowledged, moves to another address while it
				// waits (a renewal from it, which the server trusts): its script requests
				// from the old one get the wait that asks DHCP again, and iPXE's next DHCP
				// binds it to the new one.
				testkit.WaitFor(t, "the VM's lease", 60*time.Second, 100*time.Millisecond, func() bool {
					return strings.Contains(srv.log.String(), `msg="lease acknowledged" mac=`+vmMAC)
				})
				moved := "10.99.0.190"
				if got := runProbe(t, n.client, probeSpec{Interface: clientIf, MAC: vmMAC, Wait: 1500 * time.Millisecond, IPXE: true, Renew: moved}); len(got) != 1 || got[0].Type != "ACK" {
					t.Fatalf("the renewal from %s: %+v, want a DHCPACK", moved, got)
				}
				testkit.WaitFor(t, "the VM asking from its old address", 60*time.Second, 250*time.Millisecond, func() bool {
					return strings.Contains(srv.log.String(), "does not hold")
				})
				srv.SetEntries(t, entry)
			}
			line := ramdiskCommandLine(t, console)
			t.Logf("ramdisk up after %s", time.Since(start).Round(time.Second))
			want := "initrd=initrd console=ttyS0 panic=-1 bc.registry=https://registry.test:7443 bc.pins=sha256/AAAA,sha256/BBBB,sha256/CCCC bc.token=rt_vm"
			if line != want {
				t.Errorf("ramdisk command line\n got: %q\nwant: %q", line, want)
			}
		})
	}
}

// startVM starts a VM that boots from its e1000 NIC on the test segment and returns the
// file its serial console goes to. The VM is stopped when the test ends.
func startVM(t *testing.T, n testNet) string {
	t.Helper()
	return n.lan.StartVM(t, "", "-m", "256", "-no-reboot", "-boot", "order=n", "-uuid", vmUUID,
		"-device", "e1000,netdev=n0,romfile="+vmROM+",mac="+vmMAC)
}

// ramdiskCommandLine waits up to 180 s for the test ramdisk's console line and returns
// the command line it prints (framedLine).
func ramdiskCommandLine(t *testing.T, console string) string {
	t.Helper()
	var line string
	testkit.WaitFor(t, "the ramdisk's command line on the console", 180*time.Second, 250*time.Millisecond, func() bool {
		b, _ := os.ReadFile(console)
		var ok bool
		line, ok = framedLine(string(b))
		return ok
	})
	return line
}

// framedLine finds in a console's output the first copy of the ramdisk's command line
// that arrived whole: the marker's line followed by the end marker's line giving its
// length. The ramdisk silences the kernel's console messages before it prints, but a
// message already on its way may still land inside a copy; it changes that copy's length
// (or breaks its end line), so the copy is skipped and the next one read.
func framedLine(out string) (string, bool) {
	for rest := out; ; {
		_, after, ok := strings.Cut(rest, marker)
		if !ok {
			return "", false
		}
		rest = after
		line, next, ok := strings.Cut(after, "\n")
		length, _, whole := strings.Cut(strings.TrimPrefix(next, endMarker), "\n")
		if !ok || !whole {
			return "", false // not all printed yet
		}
		line = strings.TrimSuffix(line, "\r")
		if strings.HasPrefix(next, endMarker) && strings.TrimSpace(length) == strconv.Itoa(len(line)) {
			return line, true
		}
	}
}

// The Secure Boot firmware of Debian's ovmf, and its variable store with Microsoft's
// keys enrolled and Secure Boot on.
const (
	ovmfSecureCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	ovmfMSVars     = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
)

// TestVMBootsRamdiskSecureBoot PXE-boots a q35 VM with OVMF's Secure Boot firmware and
// Microsoft's keys into the test ramdisk through the signed chain: the firmware loads
// shim by TFTP and verifies it (Microsoft's signature), shim loads Debian's network GRUB
// beside it and verifies it (Debian's), GRUB loads grub/grub.cfg, the machine's
// boot/<mac>.grub and the kernel and initrd it names, all by TFTP, and verifies the
// kernel through shim before it boots it; the kernel runs locked down.
func TestVMBootsRamdiskSecureBoot(t *testing.T) {
	netns.Require(t, "qemu-system-x86_64")
	for _, f := range []string{ovmfSecureCode, ovmfMSVars} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("needs OVMF with Secure Boot (ovmf): %v", err)
		}
	}
	loaders := netns.SignedLoaders(t)
	dir := testkit.RamdiskImage(t)
	n := newTestNet(t)
	cfg := netConfig(t, Authoritative)
	cfg.RamdiskDir, cfg.ShimFile, cfg.GRUBFile = dir, loaders.Shim, loaders.NetGRUB
	cfg.RetryInterval = Duration(2 * time.Second)
	srv := startServer(t, n.server, cfg, map[string]Entry{vmMAC: {Kind: KindRamdisk, SecureBoot: true, Ramdisk: Ramdisk{
		Kernel: "vmlinuz", Initrd: "initrd.img", Token: "rt_vm", Registry: "https://registry.test:7443",
		Pins: []string{"sha256/AAAA", "sha256/BBBB", "sha256/CCCC"}, Args: []string{"console=ttyS0", "panic=-1"}}}})
	vars := filepath.Join(t.TempDir(), "vars.fd")
	b, err := os.ReadFile(ovmfMSVars)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vars, b, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	console := n.lan.StartVM(t, "", "-machine", "q35,smm=on", "-m", "512", "-no-reboot", "-boot", "order=n", "-uuid", vmUUID,
		"-global", "driver=cfi.pflash01,property=secure,value=on",
		"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+ovmfSecureCode, "-drive", "if=pflash,format=raw,unit=1,file="+vars,
		"-device", "virtio-net-pci,netdev=n0,romfile=,mac="+vmMAC)
	line := ramdiskCommandLine(t, console)
	t.Logf("ramdisk up after %s", time.Since(start).Round(time.Second))
	want := "console=ttyS0 panic=-1 bc.registry=https://registry.test:7443 bc.pins=sha256/AAAA,sha256/BBBB,sha256/CCCC bc.token=rt_vm"
	if got := strings.TrimSpace(line); got != "BOOT_IMAGE=/ramdisk/vmlinuz "+want {
		t.Errorf("ramdisk command line\n got: %q\nwant: %q after GRUB's BOOT_IMAGE", got, want)
	}
	out, _ := os.ReadFile(console)
	for _, w := range []string{"secureboot: Secure boot enabled", "Kernel is locked down from EFI Secure Boot"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("the console has no %q", w)
		}
	}
	log := srv.log.String()
	const sent = `msg="tftp sent" file=`
	// OVMF's PXE asks for a window (RFC 7440) for shim, and so does shim for GRUB
	// through it: both go by the windowed sender.
	for _, f := range []string{shimName, grubName} {
		if !regexp.MustCompile(`msg="tftp sent" file=` + f + ` client=\S+ blksize=\d+ windowsize=\d+ `).MatchString(log) {
			t.Errorf("%s went without a window", f)
		}
	}
	for _, w := range []string{sent + shimName, sent + grubName, sent + "/" + grub.EntryName,
		sent + "/" + grub.Path(vmMAC), sent + "/ramdisk/vmlinuz", sent + "/ramdisk/initrd.img"} {
		if !strings.Contains(log, w) {
			t.Errorf("the server's log has no %q", w)
		}
	}
	if t.Failed() {
		t.Logf("console:\n%s", out)
	}
}
