package hostenv

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
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
