package cache

import (
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/testkit/crashpoint"
)

// TestNewIndexChild is the child of TestNewIndexNameIsSynced: it opens a cache in the
// directory its parent names, which makes the index and sha256/ and partial/.
func TestNewIndexChild(t *testing.T) {
	c, err := Open(Config{Dir: crashpoint.Child(t)})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestNewIndexNameIsSynced: the cache directory is fsynced once Open made the index and
// the directories of images in it: each commit fsyncs the index file, and a pull fsyncs
// sha256/, but their names are the cache directory's, and a power loss that took them
// would take every record and every image reported present. So is the cache directory's
// parent, when Open made the cache directory: its name is the parent's.
func TestNewIndexNameIsSynced(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	calls := crashpoint.Trace(t, "TestNewIndexChild", dir)
	crashpoint.SyncedDir(t, calls, dir)
	for _, name := range []string{"index.db", "sha256", "partial"} {
		crashpoint.SyncedDir(t, calls, filepath.Join(dir, name))
	}
}
