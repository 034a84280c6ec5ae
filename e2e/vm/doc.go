// Package vm holds the end-to-end test of a whole deploy on a virtual machine: a real
// registry, `bcd join --role site` and `bcd site` in a network namespace, and a qemu VM
// (TCG) that PXE-boots the `make ramdisk` ramdisk, is written with a signed image from
// the site cache, kexecs into the written OS and joins as an active node; and the test of
// disk.wipe on a VM's NVMe, SATA and virtio disks in every mode, read back from the host.
// It has no code of its own.
package vm
