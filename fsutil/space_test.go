package fsutil

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"
)

// SpaceOf reads a filesystem's size and free space; a missing path is an error that
// says so.
func TestSpaceOf(t *testing.T) {
	dir := t.TempDir()
	sp, err := SpaceOf(dir)
	if err != nil {
		t.Fatal(err)
	}
	if sp.Total <= 0 || sp.Avail < 0 || sp.Avail > sp.Total {
		t.Fatalf("SpaceOf(%s) = %+v, want 0 <= avail <= total, total > 0", dir, sp)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := SpaceOf(missing); err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("SpaceOf(%s): %v, want a not-exist error", missing, err)
	}
}
