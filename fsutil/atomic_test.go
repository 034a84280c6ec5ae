package fsutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWriteFileAtomicReplacesWholeAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, content := range []string{"first", "second, longer"} {
		if err := WriteFileAtomic(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file", len(entries))
	}
}

// TestWriteFileNewRefusesAnExistingFile: a file that exists stays as it was, and no
// temporary file is left beside it; a new one is written whole with its mode.
func TestWriteFileNewRefusesAnExistingFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "admin.conf")
	if err := os.WriteFile(path, []byte("the only root credential"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileNew(path, []byte("another"), 0o600); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("over an existing file: %v, want fs.ErrExist", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "the only root credential" {
		t.Errorf("the existing file now holds %q", got)
	}
	fresh := filepath.Join(dir, "reader.conf")
	if err := WriteFileNew(fresh, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(fresh); string(got) != "new" {
		t.Errorf("the new file holds %q", got)
	}
	if st, _ := os.Stat(fresh); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("directory holds %d entries, want the two files only", len(entries))
	}
}

func TestWriteFileAtomicMissingDirectory(t *testing.T) {
	if err := WriteFileAtomic(filepath.Join(t.TempDir(), "no", "f"), nil, 0o600); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

// TestRemoveTemps plants what a kill between WriteFileAtomic's create and rename leaves,
// beside files of other names, and checks only the leftovers go.
func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFileAtomic(filepath.Join(dir, "kept.key"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	leftovers := []string{".serving-ca.key.tmp-2213987710", ".admin.conf.tmp-1", ".a.tmp-.tmp-42"}
	others := []string{"kept.key", "serving-ca.key.tmp-1", ".serving-ca.key.tmp-", ".x.tmp-12a", ".tmp-1", "notes.tmp-1"}
	for _, name := range append(append([]string{}, leftovers...), others[1:]...) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, ".dir.tmp-7"), 0o700); err != nil {
		t.Fatal(err)
	}
	removed, err := RemoveTemps(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := slices.Sorted(slices.Values(leftovers))
	if !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want = slices.Sorted(slices.Values(append(others, ".dir.tmp-7")))
	if !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
	if removed, err := RemoveTemps(dir); err != nil || len(removed) != 0 {
		t.Errorf("a second pass removed %q, %v", removed, err)
	}
}

// TestRemoveTempsOf removes only the leftovers of the one file named, in a directory
// holding other files' leftovers that are not its caller's.
func TestRemoveTempsOf(t *testing.T) {
	dir := t.TempDir()
	mine := []string{".kek.tmp-3152588646", ".kek.tmp-1"}
	others := []string{"kek", ".other.key.tmp-2", ".kek.tmp-", ".kek.tmp-1a", ".kek.old.tmp-5", ".x.kek.tmp-3"}
	for _, name := range append(append([]string{}, mine...), others...) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("k"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveTempsOf(filepath.Join(dir, "kek"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := slices.Sorted(slices.Values(mine)); !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := slices.Sorted(slices.Values(others)); !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
}

// TestRemoveEntries removes the entries that match, a directory with what it holds, and
// names them in the directory's order; a directory it cannot read is a failure that says
// so, naming it.
func TestRemoveEntries(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "b", "deep"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b/deep/c", "kept"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveEntries(dir, func(e fs.DirEntry) bool { return e.Name() != "kept" })
	if err != nil || !slices.Equal(removed, []string{"a", "b"}) {
		t.Errorf("removed %q, %v; want a and b", removed, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 || entries[0].Name() != "kept" {
		t.Errorf("left %v, want kept alone", entries)
	}
	missing := filepath.Join(dir, "missing")
	_, err = RemoveEntries(missing, func(fs.DirEntry) bool { return true })
	if pe, ok := errors.AsType[*fs.PathError](err); !ok || pe.Op != "reading" || pe.Path != missing || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing directory: %v, want reading %s: not found", err, missing)
	}
}
