package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadPrivate: a file only its owner may use is read; one its group or others may
// read, write or execute is refused with ErrExposed and the chmod that fixes it.
func TestReadPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o600, 0o400, 0o700} {
		os.Chmod(path, mode)
		if data, err := ReadPrivate(path); err != nil || string(data) != "s3cret" {
			t.Errorf("mode %04o: %q, %v", mode, data, err)
		}
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o602, 0o610, 0o601} {
		os.Chmod(path, mode)
		data, err := ReadPrivate(path)
		if !errors.Is(err, ErrExposed) || data != nil || !strings.Contains(err.Error(), "chmod 600 "+path) {
			t.Errorf("mode %04o: %q, %v; want ErrExposed saying chmod 600", mode, data, err)
		}
	}
	if _, err := ReadPrivate(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}
