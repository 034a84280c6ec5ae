package vm

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/e2e/netns"
	"github.com/better-compute/better-compute/testkit"
)

// imageSize is the size of the test's OS disk image.
const imageSize = 128 << 20

// osInit is the written OS's /init, appended to the ramdisk's initramfs (a later cpio
// member replaces an earlier one): the ramdisk's modules and busybox bring up the disk
// and the network, the root file system is mounted, and the user data cloud-init's
// NoCloud seed holds runs as a script in it, as cloud-init runs user data that starts
// with #!.
const osInit = `#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in crc32c_generic virtio_pci virtio_blk virtio_net e1000 ext4; do modprobe -q "$m" 2>/dev/null; done
ip link set lo up
for dev in /sys/class/net/*; do
	name=${dev##*/}
	[ -e "$dev/device" ] || continue
	ip link set "$name" up
	udhcpc -q -n -t 10 -s /usr/share/udhcpc/default.script -i "$name" && break
done
mkdir -p /sysroot
for i in 1 2 3 4 5 6 7 8 9 10; do [ -b /dev/vda1 ] && break; sleep 1; done
mount -t ext4 /dev/vda1 /sysroot || { echo "BC-OS-FAILED no root"; exec sh; }
mount --bind /proc /sysroot/proc
mount --bind /sys /sysroot/sys
mount --bind /dev /sysroot/dev
echo "BC-OS-UP"
done=/sysroot/var/lib/cloud/first-boot-done
if [ -e $done ]; then
	firmware=bios
	[ -d /sys/firmware/efi ] && firmware=uefi
	echo "BC-OS-BOOTED-AGAIN firmware=$firmware cmdline: $(cat /proc/cmdline)"
	exec chroot /sysroot /usr/local/bin/bcd node
fi
: >$done
sync
seed=/var/lib/cloud/seed/nocloud/user-data
[ -f /sysroot$seed ] || { echo "BC-OS-FAILED no user data"; exec sh; }
chmod 0700 /sysroot$seed
chroot /sysroot $seed
echo "BC-OS-FAILED user data exited ($?)"
exec sh
`

// buildOSImage writes a GPT disk image of imageSize at path, shaped like the cloud
// images operators deploy: a root partition (partition 1, the x86-64 root type, named
// root) holding an ext4 file system with busybox, a static bcd at /usr/local/bin/bcd,
// and /boot/vmlinuz and /boot/initrd.img (the ramdisk's kernel, and its initramfs with
// osInit as /init); an EFI system partition (partition 2) holding, as Debian's cloud
// images do, Debian's signed shim as the fallback loader \EFI\BOOT\BOOTX64.EFI, the
// signed GRUB it starts next to it and GRUB's configuration at \EFI\debian\grub.cfg;
// and a BIOS boot partition (partition 3) holding GRUB's core image, which GRUB's boot
// sector in the protective MBR loads (installBIOSBoot). Both GRUBs boot the root
// partition's kernel with bc.loader=grub-efi or grub-pc on its command line. It
// returns the root partition's byte range.
func buildOSImage(t *testing.T, path, ramdiskDir, bcd, busybox string) (start, size int64) {
	t.Helper()
	loaders := netns.SignedLoaders(t)
	shim, grubEFI := loaders.Shim, loaders.GRUB
	tree := filepath.Join(t.TempDir(), "root")
	for _, d := range []string{"bin", "boot", "dev", "proc", "sys", "tmp", "run", "etc/kernel", "usr/local/bin", "var/lib/cloud", "root"} {
		mkdir(t, filepath.Join(tree, d))
	}
	copyFile(t, busybox, filepath.Join(tree, "bin/busybox"), 0o755)
	for _, applet := range []string{"sh", "mkdir", "chmod", "printf", "cat", "echo", "mount", "ls", "sleep"} {
		if err := os.Symlink("busybox", filepath.Join(tree, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, bcd, filepath.Join(tree, "usr/local/bin/bcd"), 0o755)
	copyFile(t, filepath.Join(ramdiskDir, "vmlinuz"), filepath.Join(tree, "boot/vmlinuz"), 0o644)
	initrd, err := os.ReadFile(filepath.Join(ramdiskDir, "initrd.img"))
	if err != nil {
		t.Fatal(err)
	}
	initrd = append(initrd, cpioGz(t, map[string]string{"init": osInit})...)
	if err := os.WriteFile(filepath.Join(tree, "boot/initrd.img"), initrd, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "etc/kernel/cmdline"), []byte("console=ttyS0 panic=-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	testkit.SparseFile(t, path, imageSize)
	// The BIOS boot partition fills the gap before the first MiB, as on cloud images.
	run(t, "sgdisk", "-a", "1",
		"-n", "3:34:2047", "-t", "3:21686148-6449-6e6f-744e-656564454649", "-c", "3:bios",
		"-n", "2:2048:+"+strconv.Itoa(espSize>>10)+"K", "-t", "2:c12a7328-f81f-11d2-ba4b-00a0c93ec93b", "-c", "2:esp",
		"-n", "1:0:0", "-t", "1:4f68bce3-e8cd-4db1-96e7-fbcaf984b709", "-c", "1:root", path)
	start, size = partition(t, path, 1)
	part := filepath.Join(t.TempDir(), "root.ext4")
	run(t, "mkfs.ext4", "-q", "-F", "-L", "root", "-d", tree, part, strconv.FormatInt(size/1024, 10)+"k")
	writeAt(t, path, part, start)

	// No boot entry in the firmware's variables: UEFI firmware starts the fallback
	// loader, BIOS the MBR's boot code.
	dir := t.TempDir()
	menu := func(loader string) string {
		file := filepath.Join(dir, loader+".cfg")
		writeFile(t, file, "set timeout=0\nsearch --no-floppy --label root --set=root\n"+
			"linux /boot/vmlinuz console=ttyS0 panic=-1 bc.loader="+loader+"\ninitrd /boot/initrd.img\nboot\n")
		return file
	}
	espStart, _ := partition(t, path, 2)
	esp := filepath.Join(dir, "esp.vfat")
	run(t, "mkfs.vfat", "-C", "-n", "ESP", esp, strconv.Itoa(espSize>>10))
	run(t, "mmd", "-i", esp, "::/EFI", "::/EFI/BOOT", "::/EFI/debian")
	run(t, "mcopy", "-i", esp, shim, "::/EFI/BOOT/BOOTX64.EFI")
	run(t, "mcopy", "-i", esp, grubEFI, "::/EFI/BOOT/grubx64.efi")
	run(t, "mcopy", "-i", esp, menu("grub-efi"), "::/EFI/debian/grub.cfg")
	writeAt(t, path, esp, espStart)

	// GRUB for BIOS, from Debian's grub-pc-bin, with the menu entry built in.
	core := filepath.Join(dir, "core.img")
	run(t, "grub-mkimage", "-O", "i386-pc", "-o", core, "-c", menu("grub-pc"), "-p", "(hd0,gpt1)/boot/grub",
		"biosdisk", "part_gpt", "ext2", "search", "search_label", "linux", "normal", "echo")
	biosStart, biosSize := partition(t, path, 3)
	installBIOSBoot(t, path, core, biosStart, biosSize)
	return start, size
}

// espSize is the size of the test image's EFI system partition.
const espSize = 16 << 20

// grubPC is where Debian's grub-pc-bin keeps GRUB's BIOS images.
const grubPC = "/usr/lib/grub/i386-pc"

// installBIOSBoot does what grub-install does for a BIOS machine with a GPT disk, on an
// image file: GRUB's core image (core, from grub-mkimage -O i386-pc, whose first sector
// is diskboot.img) goes to the BIOS boot partition at start, and GRUB's boot.img to the
// protective MBR's boot code, keeping its disk signature and partition table. boot.img
// reads the core image's first sector, whose block list then reads the rest.
func installBIOSBoot(t *testing.T, path, core string, start, size int64) {
	t.Helper()
	img, err := os.ReadFile(core)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(img)) > size {
		t.Fatalf("GRUB's core image is %d bytes, its BIOS boot partition %d", len(img), size)
	}
	sectors := (len(img) + 511) / 512
	// diskboot.img's block list, in the last 12 bytes of its sector: the first sector
	// to read (8 bytes), how many (2) and the segment to read them to (2, kept).
	list := img[512-12:]
	binary.LittleEndian.PutUint64(list[0:], uint64(start/512+1))
	binary.LittleEndian.PutUint16(list[8:], uint16(sectors-1))
	writeBytesAt(t, path, img, start)

	boot, err := os.ReadFile(filepath.Join(grubPC, "boot.img"))
	if err != nil {
		t.Fatal(err)
	}
	// boot.img's kernel sector (at 0x5c): where the core image starts.
	binary.LittleEndian.PutUint64(boot[0x5c:], uint64(start/512))
	// 440 bytes of boot code; the disk signature and the partition table stay.
	writeBytesAt(t, path, boot[:440], 0)
}

// partition returns partition n's byte range in the GPT image at path.
func partition(t *testing.T, path string, n int) (start, size int64) {
	t.Helper()
	out := run(t, "sgdisk", "-i", strconv.Itoa(n), path)
	first, last := sector(t, out, "First sector:"), sector(t, out, "Last sector:")
	return first * 512, (last - first + 1) * 512
}

// writeAt writes the file from into the image at path at byte offset off.
func writeAt(t *testing.T, path, from string, off int64) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeBytesAt(t, path, b, off)
}

func writeBytesAt(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteAt(b, off)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

func sector(t *testing.T, out, label string) int64 {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), label); ok {
			n, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err == nil {
				return n
			}
		}
	}
	t.Fatalf("no %q in sgdisk's output:\n%s", label, out)
	return 0
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func mkdir(t *testing.T, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, mode)
	}
	if err != nil {
		t.Fatal(fmt.Errorf("copy %s: %w", from, err))
	}
}
