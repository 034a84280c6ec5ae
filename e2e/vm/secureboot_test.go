package vm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/testkit"
)

const (
	// ovmfSecureCode is OVMF built with Secure Boot (and SMM, which guards its variables);
	// ovmfMSVars its variable store with Microsoft's keys enrolled and Secure Boot on.
	ovmfSecureCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	ovmfMSVars     = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
)

// TestVMImageSecureBoot boots the image the VM tests deploy, as written, on a q35 VM with
// OVMF's Secure Boot firmware and Microsoft's keys: the firmware verifies shim
// (Microsoft's signature), shim GRUB and GRUB the kernel (Debian's), and the kernel runs
// locked down. The deploy itself cannot run so yet: the site's boot chain (iPXE) is not
// signed.
func TestVMImageSecureBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	for _, f := range []string{ovmfSecureCode, ovmfMSVars} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("needs OVMF with Secure Boot (ovmf): %v", err)
		}
	}
	for _, tool := range []string{"qemu-system-x86_64", "sgdisk", "mkfs.ext4", "cpio", "grub-mkimage", "mkfs.vfat", "mcopy"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("needs busybox (busybox-static)")
	}
	ramdisk := makeRamdisk(t)
	work := t.TempDir()
	image := filepath.Join(work, "os.raw")
	buildOSImage(t, image, ramdisk, testkit.Binary(t, "bcd"), busybox)
	vars := filepath.Join(work, "vars.fd")
	copyFile(t, ovmfMSVars, vars, 0o600)
	console := filepath.Join(work, "console.log")
	ctx, cancel := context.WithCancel(context.Background())
	qemu := exec.CommandContext(ctx, "qemu-system-x86_64", "-machine", "q35,smm=on", "-accel", "tcg", "-smp", "1", "-m", "512",
		"-display", "none", "-monitor", "none", "-nic", "none", "-serial", "file:"+console,
		"-global", "driver=cfi.pflash01,property=secure,value=on",
		"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+ovmfSecureCode, "-drive", "if=pflash,format=raw,unit=1,file="+vars,
		"-drive", "file="+image+",if=none,id=d0,format=raw,snapshot=on", "-device", "virtio-blk-pci,drive=d0")
	var qemuOut strings.Builder
	qemu.Stdout, qemu.Stderr = &qemuOut, &qemuOut
	if err := qemu.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	var seen string
	// OVMF says so when it refused or found every boot option.
	over := func() bool {
		return strings.Contains(seen, "BC-OS-UP") || strings.Contains(seen, "No bootable option or device was found")
	}
	for end := time.Now().Add(5 * time.Minute); time.Now().Before(end) && !over(); time.Sleep(time.Second) {
		b, _ := os.ReadFile(console)
		seen = string(b)
	}
	cancel()
	qemu.Wait()
	for _, want := range []string{"secureboot: Secure boot enabled", "Kernel is locked down from EFI Secure Boot",
		"Command line: BOOT_IMAGE=/boot/vmlinuz console=ttyS0 panic=-1 bc.loader=grub-efi", "BC-OS-UP"} {
		if !strings.Contains(seen, want) {
			t.Fatalf("the console has no %q\nqemu: %s\nconsole:\n%s", want, qemuOut.String(), seen)
		}
	}
}
