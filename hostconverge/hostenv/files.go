package hostenv

import (
	"bytes"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
)

// ReadFile reads the host file name.
func (p *Pass) ReadFile(name string) ([]byte, error) {
	b, err := os.ReadFile(p.Path(name))
	if err != nil {
		return nil, fileError("reading", name, err)
	}
	return b, nil
}

// ReadOptional reads the host file name; a missing file is (nil, false, nil).
func (p *Pass) ReadOptional(name string) ([]byte, bool, error) {
	b, err := os.ReadFile(p.Path(name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, nil
	case err != nil:
		return nil, false, fileError("reading", name, err)
	}
	return b, true, nil
}

// Exists reports whether the host path name exists.
func (p *Pass) Exists(name string) (bool, error) {
	_, err := os.Stat(p.Path(name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fileError("checking", name, err)
	}
	return true, nil
}

// EnsureFile makes the host file name hold exactly data with mode perm, creating its
// directory, and records "wrote" or "rewrote" when it had to. A file that holds data
// already is not touched (its mode is corrected when it differs, and the file fsynced
// after, so the correction survives a power loss). The write is atomic: a reader, or the
// host after a crash, sees the old file or the new one; the directories it makes are
// fsynced in their parents, so the file keeps its path after a power loss.
func (p *Pass) EnsureFile(name string, data []byte, perm fs.FileMode) (changed bool, err error) {
	path := p.Path(name)
	old, existed, err := p.ReadOptional(name)
	if err != nil {
		return false, err
	}
	if existed && bytes.Equal(old, data) {
		info, err := os.Stat(path)
		if err != nil {
			return false, fileError("checking", name, err)
		}
		if info.Mode().Perm() == perm {
			return false, nil
		}
		if err := fsutil.Chmod(path, perm); err != nil { // fsynced: the pass reports it done
			return false, fileError("setting the mode of", name, err)
		}
		p.Corrected("set the mode of %s %v -> %v", name, info.Mode().Perm(), perm)
		return true, nil
	}
	if err := fsutil.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fileError("making the directory of", name, err)
	}
	if err := fsutil.WriteFileAtomic(path, data, perm); err != nil {
		return false, fileError("writing", name, err)
	}
	if existed {
		p.Corrected("rewrote %s", name)
	} else {
		p.Corrected("wrote %s", name)
	}
	return true, nil
}

// RemoveFile removes the host file name if it exists, and records it. The removal is
// fsynced (its directory) before the pass reports it: a host that loses power after
// does not boot with the file back.
func (p *Pass) RemoveFile(name string) (removed bool, err error) {
	err = fsutil.Remove(p.Path(name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fileError("removing", name, err)
	}
	p.Corrected("removed %s", name)
	return true, nil
}

// PrivateDir holds the files WithPrivateFile puts a secret in, and nothing else: mode
// 0700, under /run, which a boot empties. Its files live only while their program runs,
// so one found there when a pass starts is what a bcd killed meanwhile left:
// RemovePrivateFiles removes it.
const PrivateDir = "/run/better-compute/private"

// WithPrivateFile puts data in the host file name, a file of PrivateDir, mode 0600 (root's
// alone, from its creation on), runs use, and removes the file whatever use returned, a
// panic included: how a secret reaches a program without being on its command line, which
// every user and process of the host reads (/proc/PID/cmdline, process listings, audit
// logs). The directories it makes are 0700. The file is no change to the host: neither it
// nor its removal is recorded.
func (p *Pass) WithPrivateFile(name string, data []byte, use func() error) (err error) {
	if path.Dir(name) != PrivateDir {
		return proto.Errorf(proto.Internal, "%s is not a file of %s, which a pass clears of what an earlier one left", name, PrivateDir)
	}
	file := p.Path(name)
	if err := fsutil.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fileError("making the directory of", name, err)
	}
	defer func() {
		if rerr := fsutil.Remove(file); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
			err = fileError("removing", name, rerr)
		}
	}()
	if err := fsutil.WriteFileAtomic(file, data, 0o600); err != nil {
		return fileError("writing", name, err)
	}
	return use()
}

// RemovePrivateFiles removes what is in PrivateDir under root (a file WithPrivateFile
// wrote, or its temporary file, which a bcd killed before use returned left behind, with
// the secret in it) and returns the host paths it removed. Call it only where no pass
// runs.
func RemovePrivateFiles(root string) ([]string, error) {
	dir := filepath.Join(root, PrivateDir)
	names, err := fsutil.RemoveEntries(dir, func(fs.DirEntry) bool { return true })
	var removed []string
	for _, n := range names {
		removed = append(removed, path.Join(PrivateDir, n))
	}
	pe, ok := errors.AsType[*fs.PathError](err)
	switch {
	case len(names) == 0 && errors.Is(err, fs.ErrNotExist): // no pass made PrivateDir since the boot
		return nil, nil
	case ok:
		return removed, fileError(pe.Op, PrivateDir+strings.TrimPrefix(pe.Path, dir), pe.Err)
	}
	return removed, err
}

// ReadValue reads a kernel value file (/proc/sys, /sys) and returns it without the
// trailing newline.
func (p *Pass) ReadValue(name string) (string, error) {
	b, err := p.ReadFile(name)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\n"), nil
}

// WriteValue writes a kernel value file in place: the kernel's files cannot be replaced
// by a rename, and the kernel takes each write whole or refuses it. The file must exist;
// a kernel file that does not is a setting this kernel lacks.
func (p *Pass) WriteValue(name, value string) error {
	f, err := os.OpenFile(p.Path(name), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fileError("opening", name, err)
	}
	_, werr := f.WriteString(value + "\n")
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return fileError("writing", name, err)
	}
	return nil
}

// Glob returns the host paths matching pattern (filepath.Match syntax), sorted.
func (p *Pass) Glob(pattern string) ([]string, error) {
	matches, err := filepath.Glob(p.Path(pattern))
	if err != nil {
		return nil, proto.Errorf(proto.Internal, "pattern %s: %w", pattern, err)
	}
	names := make([]string, len(matches))
	for i, m := range matches {
		rel, _ := filepath.Rel(p.Root, m)
		names[i] = "/" + filepath.ToSlash(rel)
	}
	slices.Sort(names)
	return names, nil
}

// fileError is a failed file operation as DRIVER_ERROR, naming the host path and the
// system's reason without the root prefix.
func fileError(op, name string, err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		err = pe.Err
	}
	if le, ok := errors.AsType[*os.LinkError](err); ok {
		err = le.Err
	}
	return proto.Errorf(proto.DriverError, "%s %s: %w", op, name, err)
}

// PendingDir holds a marker for each host file a pass changed whose program (update-grub
// for a GRUB drop-in, systemctl for a unit file) has not applied it yet, named by the
// file's whole path, escaped: two files of one base name in two directories (systemd's
// override.conf drop-ins) have a marker each.
const PendingDir = "/var/lib/better-compute/host/pending"

// pendingMarker is the marker of the host file name: its path with each / escaped
// (url.PathEscape, which escapes % too, so two paths never share a marker).
func pendingMarker(name string) string {
	return PendingDir + "/" + url.PathEscape(path.Clean("/"+name))
}

// oldPendingMarker is the marker an earlier bcd left for the host file name, named by
// its base name alone; it is honoured until the file is applied, so that a pass killed
// before bcd was upgraded still has its change applied.
func oldPendingMarker(name string) string { return PendingDir + "/" + filepath.Base(name) }

// ChangeFile makes the host file name hold data with mode perm as EnsureFile does, or
// removes it as RemoveFile does when data is nil, for a program to apply, and reports
// whether that program is due: the file changed now, or an earlier pass changed it and
// did not see the program succeed (it was killed in between, or the program failed).
// The marker that remembers it is on disk before the file changes, and stays until
// Applied removes it, so a file as the unit wants it is never taken as applied when it
// is not.
func (p *Pass) ChangeFile(name string, data []byte, perm fs.FileMode) (due bool, err error) {
	marker := pendingMarker(name)
	pending, err := p.Pending(name)
	if err != nil {
		return false, err
	}
	old, existed, err := p.ReadOptional(name)
	if err != nil {
		return false, err
	}
	if !pending && (existed != (data != nil) || !bytes.Equal(old, data)) {
		if err := fsutil.MkdirAll(p.Path(PendingDir), 0o755); err != nil {
			return false, fileError("making", PendingDir, err)
		}
		if err := fsutil.WriteFileAtomic(p.Path(marker), nil, 0o644); err != nil {
			return false, fileError("writing", marker, err)
		}
	}
	var changed bool
	if data == nil {
		changed, err = p.RemoveFile(name)
	} else {
		changed, err = p.EnsureFile(name, data, perm)
	}
	return changed || pending, err
}

// Pending reports whether an earlier pass changed the host file name (ChangeFile) and
// did not see the program applying it succeed.
func (p *Pass) Pending(name string) (bool, error) {
	pending, err := p.Exists(pendingMarker(name))
	if pending || err != nil {
		return pending, err
	}
	return p.Exists(oldPendingMarker(name))
}

// Applied records that the program applying the host file name ChangeFile changed
// succeeded.
func (p *Pass) Applied(name string) error {
	for _, marker := range []string{pendingMarker(name), oldPendingMarker(name)} {
		if err := fsutil.Remove(p.Path(marker)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fileError("removing", marker, err)
		}
	}
	return nil
}
