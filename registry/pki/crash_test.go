package pki

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/testkit/crashpoint"
)

// TestCreateKEKChild is TestCreateKEKKilled's child: it makes the KEK file its parent
// names.
func TestCreateKEKChild(t *testing.T) {
	if _, err := CreateKEK(crashpoint.Child(t)); err != nil {
		t.Fatal(err)
	}
}

// TestCreateKEKKilled kills CreateKEK (in a child) at each of its writes and fsyncs:
// what a kill leaves is no KEK file, which the next start makes, or the whole one, never
// a part the next start refuses as "not a key-encryption key" when there is no other to
// copy. And the file's directory is fsynced once it is in place: the registry seals its
// keys into the store with it next, and a power loss that kept them but lost the KEK
// file's name would lose every key.
func TestCreateKEKKilled(t *testing.T) {
	fresh := func() string { return filepath.Join(t.TempDir(), "kek") }
	kills := crashpoint.EachKill(t, "TestCreateKEKChild", fresh, func(path, call string, n int) {
		if _, err := LoadKEK(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("killed at %s #%d, the next start: %v", call, n, err)
		}
	})
	if kills == 0 {
		t.Fatal("the child was never killed")
	}
	path := fresh()
	crashpoint.SyncedDir(t, crashpoint.Trace(t, "TestCreateKEKChild", path), path)
	if _, err := LoadKEK(path); err != nil {
		t.Fatalf("the KEK the child made: %v", err)
	}
}
