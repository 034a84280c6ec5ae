package kexec

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
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
//
// The file systems are the image's: every path is resolved within its partition, its
// symbolic links included (os.Root), and a file reached only through a link that leaves
// the partition is not found, so nothing of the ramdisk (its config dir, its own kernel)
// is loaded for the new kernel or put on its command line; and only regular files are
// read, of at most 1 MiB (a boot entry 64 KiB), so that a FIFO or a sparse gigabyte in
// the place of one neither stops nor fills the ramdisk.
func Find(root, boot, rootPartUUID string) (Boot, error) {
	rootFS, err := open(root, "")
	if err != nil {
		return Boot{}, err
	}
	defer rootFS.fs.Close()
	bootFS := rootFS.at("boot")
	if boot != "" {
		if bootFS, err = open(boot, ""); err != nil {
			return Boot{}, err
		}
		defer bootFS.fs.Close()
	}
	if b, ok, err := fromEntries(bootFS); err != nil || ok {
		return b, err
	}
	for _, dir := range []partition{rootFS.at("boot"), rootFS} {
		if !dir.isFile("vmlinuz") {
			continue
		}
		b := Boot{Kernel: dir.path("vmlinuz")}
		if dir.isFile("initrd.img") {
			b.Initrds = []string{dir.path("initrd.img")}
		}
		b.Cmdline = cmdline(rootFS, bootFS, rootPartUUID)
		return b, nil
	}
	return Boot{}, ErrNotFound
}

// partition is a directory (sub) of a file system of the written OS mounted at dir: its
// paths are resolved within that file system, never outside it.
type partition struct {
	fs       *os.Root
	dir, sub string
}

func open(dir, sub string) (partition, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return partition{}, err
	}
	return partition{fs: r, dir: dir, sub: sub}, nil
}

// at is the directory sub of p.
func (p partition) at(sub string) partition {
	p.sub = filepath.Join(p.sub, sub)
	return p
}

// name is path (taken from p's directory, a leading / and .. included) as a name in
// p's file system.
func (p partition) name(path string) string {
	return strings.TrimPrefix(filepath.Join("/", p.sub, filepath.Clean("/"+path)), "/")
}

// path is path in the ramdisk's view, for kexec to open.
func (p partition) path(path string) string {
	return filepath.Join(p.dir, p.name(path))
}

// isFile reports whether path is a regular file within p's file system.
func (p partition) isFile(path string) bool {
	st, err := p.fs.Stat(p.name(path))
	return err == nil && st.Mode().IsRegular()
}

// maxConfigBytes bounds a file Find reads (a command line, a grub.cfg): real ones are a
// few KiB, the largest grub.cfg some hundreds.
const maxConfigBytes = 1 << 20

func (p partition) readFile(path string, limit int64) ([]byte, error) {
	return readRegular(p.fs, p.name(path), limit)
}

// readRegular reads name of r, a regular file of at most limit bytes. The file system is
// the image's: a FIFO, device node or larger file in the place of a configuration file
// is refused, never waited on (opening a FIFO waits for a writer) or read to its end.
func readRegular(r *os.Root, name string, limit int64) ([]byte, error) {
	st, err := r.Stat(name)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > limit {
		return nil, fmt.Errorf("%s is not a regular file of at most %d bytes", name, limit)
	}
	f, err := r.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("%s is larger than %d bytes", name, limit)
	}
	return b, err
}

// fromEntries picks the newest entry of loader/entries on the boot partition; its kernel
// and initrds must be files of that partition.
func fromEntries(boot partition) (Boot, bool, error) {
	paths, err := fs.Glob(boot.fs.FS(), path.Join(filepath.ToSlash(boot.name("loader/entries")), "*.conf"))
	if err != nil || len(paths) == 0 {
		return Boot{}, false, nil
	}
	var entries []Entry
	for _, p := range paths {
		text, err := readRegular(boot.fs, p, maxEntryBytes)
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
	b := Boot{Kernel: boot.path(newest.Linux), Cmdline: newest.Options}
	for _, i := range newest.Initrd {
		b.Initrds = append(b.Initrds, boot.path(i))
	}
	for _, f := range append([]string{newest.Linux}, newest.Initrd...) {
		if !boot.isFile(f) {
			return Boot{}, false, fmt.Errorf("boot entry %q: %s is not a file of the boot partition", newest.Title, f)
		}
	}
	return b, true, nil
}

// cmdline is the command line of an OS without boot entries.
func cmdline(root, boot partition, rootPartUUID string) string {
	if b, err := root.readFile("etc/kernel/cmdline", maxConfigBytes); err == nil {
		if s := strings.Join(strings.Fields(string(b)), " "); s != "" {
			return s
		}
	}
	if b, err := boot.readFile("grub/grub.cfg", maxConfigBytes); err == nil {
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
