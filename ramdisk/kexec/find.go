package kexec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Boot is what kexec loads: paths in the ramdisk's view of the mounted OS.
type Boot struct {
	Kernel string
	// Initrds are concatenated in order (an early microcode archive, then the
	// initramfs); none is allowed.
	Initrds []string
	Cmdline string
}

// ErrNotFound means no kernel was found in the written OS.
var ErrNotFound = errors.New("no kernel found in the written OS")

// Find looks for the OS's kernel under root (its root file system, mounted) and boot
// (its boot partition, mounted; or "" when /boot is on the root file system):
//
//  1. Boot Loader Specification entries in loader/entries of the boot partition,
//     taking the highest version; its options are the command line.
//  2. The vmlinuz and initrd.img symlinks Debian and Ubuntu keep in /boot (or /).
//
// Without an entry the command line is /etc/kernel/cmdline, else the arguments of the
// first `linux` line of /boot/grub/grub.cfg, else `root=PARTUUID=<rootPartUUID> ro`.
func Find(root, boot, rootPartUUID string) (Boot, error) {
	if boot == "" {
		boot = filepath.Join(root, "boot")
	}
	if b, ok, err := fromEntries(boot); err != nil || ok {
		return b, err
	}
	for _, dir := range []string{filepath.Join(root, "boot"), root} {
		kernel := filepath.Join(dir, "vmlinuz")
		if _, err := os.Stat(kernel); err != nil {
			continue
		}
		b := Boot{Kernel: kernel}
		if initrd := filepath.Join(dir, "initrd.img"); fileExists(initrd) {
			b.Initrds = []string{initrd}
		}
		b.Cmdline = cmdline(root, boot, rootPartUUID)
		return b, nil
	}
	return Boot{}, ErrNotFound
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// fromEntries picks the newest entry of boot/loader/entries.
func fromEntries(boot string) (Boot, bool, error) {
	paths, err := filepath.Glob(filepath.Join(boot, "loader", "entries", "*.conf"))
	if err != nil || len(paths) == 0 {
		return Boot{}, false, err
	}
	var entries []Entry
	for _, p := range paths {
		text, err := os.ReadFile(p)
		if err != nil {
			return Boot{}, false, err
		}
		e, err := ParseEntry(string(text))
		if err != nil {
			return Boot{}, false, fmt.Errorf("%s: %w", p, err)
		}
		entries = append(entries, e)
	}
	newest := slices.MaxFunc(entries, func(a, b Entry) int { return compareVersions(a.Version, b.Version) })
	b := Boot{Kernel: within(boot, newest.Linux), Cmdline: newest.Options}
	for _, i := range newest.Initrd {
		b.Initrds = append(b.Initrds, within(boot, i))
	}
	return b, true, nil
}

// within resolves an entry's path on its partition, never outside it.
func within(dir, path string) string {
	return filepath.Join(dir, filepath.Clean("/"+path))
}

// cmdline is the command line of an OS without boot entries.
func cmdline(root, boot, rootPartUUID string) string {
	if b, err := os.ReadFile(filepath.Join(root, "etc/kernel/cmdline")); err == nil {
		if s := strings.Join(strings.Fields(string(b)), " "); s != "" {
			return s
		}
	}
	if b, err := os.ReadFile(filepath.Join(boot, "grub/grub.cfg")); err == nil {
		if s, ok := GrubCmdline(string(b)); ok {
			return s
		}
	}
	return "root=PARTUUID=" + rootPartUUID + " ro"
}

// GrubCmdline returns the arguments of the first `linux` line of a GRUB configuration,
// without the ones that expand GRUB variables.
func GrubCmdline(cfg string) (string, bool) {
	for line := range strings.Lines(cfg) {
		f := strings.Fields(line)
		if len(f) < 2 || (f[0] != "linux" && f[0] != "linuxefi") {
			continue
		}
		var args []string
		for _, a := range f[2:] {
			if !strings.Contains(a, "$") {
				args = append(args, a)
			}
		}
		return strings.Join(args, " "), true
	}
	return "", false
}
