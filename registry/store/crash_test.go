package store

import (
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/testkit/crashpoint"
)

// TestKilledStoreChild is the child of TestStoreKilledAtEachWrite and
// TestNewStoreIsSynced: it makes a store in the directory its parent names and commits
// two tenants, one transaction each.
func TestKilledStoreChild(t *testing.T) {
	s, err := Open(crashpoint.Child(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, name := range []string{"first", "second"} {
		if err := s.Update(func(tx *Tx) error { _, err := tx.CreateTenant(name); return err }); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStoreKilledAtEachWrite kills a registry's store (in a child) at each of its writes
// and fsyncs, from the file's making to its second commit: the next start opens what is
// left, Check finds it consistent, and it holds the commits made before the kill in their
// order (the second tenant only with the first).
func TestStoreKilledAtEachWrite(t *testing.T) {
	kills := crashpoint.EachKill(t, "TestKilledStoreChild", func() string { return t.TempDir() }, func(dir, call string, n int) {
		s, err := Open(dir, Options{})
		if err != nil {
			t.Errorf("killed at %s #%d, the next start: %v", call, n, err)
			return
		}
		defer s.Close()
		if err := s.Check(); err != nil {
			t.Errorf("killed at %s #%d, the store: %v", call, n, err)
		}
		var names []string
		if err := s.View(func(tx *Tx) error {
			ts, _, err := tx.Tenants(Page{})
			for _, tn := range ts {
				names = append(names, tn.ID)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if len(names) == 1 && names[0] != "first" || len(names) > 2 {
			t.Errorf("killed at %s #%d, the store holds tenants %q", call, n, names)
		}
	})
	if kills < 4 {
		t.Fatalf("the child was killed %d times", kills)
	}
}

// TestNewStoreIsSynced: a store Open makes in a data directory that does not exist yet
// survives a power loss once a commit returned, whoever opened it (serve, `store copy`,
// a tool or a test): the directories it made are fsynced in their parents, and the
// store file's name in the data directory. bbolt fsyncs the file on each commit, never
// its directory, so a power loss could keep the commits' pages and lose the file's name.
func TestNewStoreIsSynced(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "srv", "data")
	calls := crashpoint.Trace(t, "TestKilledStoreChild", dir)
	for _, path := range []string{filepath.Dir(dir), dir, filepath.Join(dir, FileName)} {
		crashpoint.SyncedDir(t, calls, path)
	}
}
