// Package kernel converges the host-config units that set the Linux kernel up:
// kernel-modules, sysctl, hugepages, cpu and iommu, and the kernel command line the last
// three share (a GRUB drop-in per unit, compared with /proc/cmdline to tell whether the
// running kernel has it or a reboot is due).
//
// Each unit reads the kernel's own files (/proc/modules, /proc/sys, /sys) under the host
// root, writes only what differs, and records each correction. docs/host-config.md
// describes what each unit writes, runs and refuses.
package kernel
