package vm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
for m in crc32c_generic virtio_pci virtio_blk e1000 ext4; do modprobe -q "$m" 2>/dev/null; done
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
seed=/var/lib/cloud/seed/nocloud/user-data
[ -f /sysroot$seed ] || { echo "BC-OS-FAILED no user data"; exec sh; }
chmod 0700 /sysroot$seed
chroot /sysroot $seed
echo "BC-OS-FAILED user data exited ($?)"
exec sh
`

// buildOSImage writes a GPT disk image of imageSize at path: one root partition
// (partition 1, the x86-64 root type, named root) holding an ext4 file system with
// busybox, a static bcd at /usr/local/bin/bcd, and /boot/vmlinuz and /boot/initrd.img
// (the ramdisk's kernel, and its initramfs with osInit as /init). It returns the root
// partition's byte range.
func buildOSImage(t *testing.T, path, ramdiskDir, bcd, busybox string) (start, size int64) {
	t.Helper()
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

	f, err := os.Create(path)
	if err == nil {
		err = f.Truncate(imageSize)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	run(t, "sgdisk", "-n", "1:2048:0", "-t", "1:4f68bce3-e8cd-4db1-96e7-fbcaf984b709", "-c", "1:root", path)
	out := run(t, "sgdisk", "-i", "1", path)
	first, last := sector(t, out, "First sector:"), sector(t, out, "Last sector:")
	start, size = first*512, (last-first+1)*512
	part := filepath.Join(t.TempDir(), "root.ext4")
	run(t, "mkfs.ext4", "-q", "-F", "-L", "root", "-d", tree, part, strconv.FormatInt(size/1024, 10)+"k")
	run(t, "dd", "if="+part, "of="+path, "bs=1M", "seek="+strconv.FormatInt(start>>20, 10), "conv=notrunc,fsync", "status=none")
	return start, size
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
