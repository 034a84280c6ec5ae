// Package fsutil holds the file-system habits every part shares: a file is replaced
// whole or not at all, and is on disk before anyone is told it is; a secret is read only
// from a file no one else may use; how much room a filesystem has is read in one place.
package fsutil

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// WriteFileAtomic writes data to path through a temporary file in the same directory:
// write, fsync, rename, fsync the directory. A reader sees the old file or the new one,
// never a part, and after a crash the file is one or the other.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return writeThroughTemp(path, data, perm, os.Rename)
}

// WriteFileNew is WriteFileAtomic for a file that must not exist: the temporary file is
// linked to path, which fails with fs.ErrExist when path exists by then, whatever made
// it, and leaves it as it was.
func WriteFileNew(path string, data []byte, perm os.FileMode) error {
	return writeThroughTemp(path, data, perm, os.Link)
}

// writeThroughTemp writes data whole to a temporary file beside path, fsyncs it, puts it
// at path with place (rename or link), and fsyncs the directory. The temporary file is
// gone afterwards, whatever failed.
func writeThroughTemp(path string, data []byte, perm os.FileMode, place func(tmp, path string) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+tempInfix+"*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if err := fillAndClose(tmp, data, perm); err != nil {
		return err
	}
	if err := place(tmp.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// WriteFileAtomicIn is WriteFileAtomic for name inside root: every directory on the way
// is resolved within root, so a symbolic link there (absolute, or with .. past root)
// fails the write instead of leading it elsewhere. For a tree someone else made, such as
// an OS image written to a disk.
func WriteFileAtomicIn(root *os.Root, name string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(name)
	tmp := filepath.Join(dir, "."+filepath.Base(name)+tempInfix+strconv.FormatUint(rand.Uint64(), 10))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	defer root.Remove(tmp) // fails harmlessly once renamed
	if err := fillAndClose(f, data, perm); err != nil {
		return err
	}
	if err := root.Rename(tmp, name); err != nil {
		return err
	}
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// fillAndClose gives a new temporary file its mode (the umask may have narrowed what it
// was created with) and data, fsyncs it and closes it; f is closed whatever failed.
func fillAndClose(f *os.File, data []byte, perm os.FileMode) error {
	err := f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// CanCreateIn checks that WriteFileAtomic and WriteFileNew can make their temporary file
// in dir, by making one and removing it: the error is os.CreateTemp's (fs.ErrNotExist
// for a missing directory, fs.ErrPermission for one the process cannot write).
func CanCreateIn(dir string) error {
	probe, err := os.CreateTemp(dir, ".probe"+tempInfix+"*")
	if err != nil {
		return err
	}
	probe.Close()
	return os.Remove(probe.Name())
}

// tempInfix marks WriteFileAtomic's temporary files: "." + the file's name + tempInfix +
// the random digits os.CreateTemp puts in place of "*".
const tempInfix = ".tmp-"

// RemoveTemps removes the temporary files WriteFileAtomic left in dir when its process
// was killed between creating one and renaming it, and returns their names. Call it
// only where no other process writes into dir at the time (the registry holds its
// store's lock when it does).
func RemoveTemps(dir string) ([]string, error) {
	return removeTemps(dir, isTemp)
}

// RemoveTempsOf is RemoveTemps for the temporary files of the one file path: for a
// directory that others write into too, whose other leftovers are not the caller's to
// remove. Call it only where no other process writes path at the time, or once path
// exists (a temporary file of WriteFileNew's could not be put in place then anyway).
func RemoveTempsOf(path string) ([]string, error) {
	prefix := "." + filepath.Base(path) + tempInfix
	return removeTemps(filepath.Dir(path), func(name string) bool {
		digits, ok := strings.CutPrefix(name, prefix)
		return ok && isNumber(digits)
	})
}

// removeTemps removes the regular files in dir whose names temp matches, and fsyncs dir
// when it removed any.
func removeTemps(dir string, temp func(name string) bool) ([]string, error) {
	return RemoveEntries(dir, func(e fs.DirEntry) bool { return e.Type().IsRegular() && temp(e.Name()) })
}

// RemoveEntries removes the entries of dir that match, each whole (a directory with what
// it holds), fsyncs dir when it removed any, and returns the names of those it removed,
// in dir's order. A failure is an *fs.PathError whose Op says what failed (reading,
// removing, syncing) and whose Path is dir, or the entry it could not remove; the names
// returned are those removed before it. Call it only where no other process writes into
// dir at the time.
func RemoveEntries(dir string, match func(fs.DirEntry) bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, pathError("reading", dir, err)
	}
	var removed []string
	for _, e := range entries {
		if !match(e) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return removed, pathError("removing", filepath.Join(dir, e.Name()), err)
		}
		removed = append(removed, e.Name())
	}
	if len(removed) == 0 {
		return nil, nil
	}
	if err := SyncDir(dir); err != nil {
		return removed, pathError("syncing", dir, err)
	}
	return removed, nil
}

// pathError is err as an *fs.PathError of op and path, the system's reason kept and the
// path of the call that failed (which may be another) dropped.
func pathError(op, path string, err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		err = pe.Err
	}
	return &fs.PathError{Op: op, Path: path, Err: err}
}

// isTemp reports whether name is one WriteFileAtomic gives its temporary files.
func isTemp(name string) bool {
	i := strings.LastIndex(name, tempInfix)
	if i < 2 || !strings.HasPrefix(name, ".") {
		return false
	}
	return isNumber(name[i+len(tempInfix):])
}

// isNumber reports whether s is digits, as os.CreateTemp puts for the * of a pattern.
func isNumber(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// MkdirAll is os.MkdirAll that makes what it makes survive a crash: the parent of each
// directory it makes is fsynced, so a file then written in the new directory
// (WriteFileAtomic fsyncs only the file's own directory) keeps its path after a power
// loss.
func MkdirAll(dir string, perm os.FileMode) error {
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil {
		if errors.Is(err, fs.ErrExist) {
			if st, serr := os.Stat(dir); serr == nil && st.IsDir() {
				return nil // made meanwhile by another
			}
		}
		return err
	}
	return SyncDir(filepath.Dir(dir))
}

// Remove removes a file and fsyncs its directory, so the removal survives a crash. A
// missing file is fs.ErrNotExist, as os.Remove says it.
func Remove(path string) error {
	if err := os.Remove(path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// Chmod is os.Chmod that makes the new mode survive a crash: the file is fsynced after,
// since a mode is the file's own metadata, which a power loss may undo until then.
func Chmod(path string, perm os.FileMode) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	return f.Sync()
}

// SyncDir fsyncs a directory, so a rename or a new entry in it survives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
