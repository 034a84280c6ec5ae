package site

import (
	"log/slog"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/testkit/crashpoint"
)

// TestFirstOpenChild is the child of TestNewStateDirIsSynced: it opens the site agent's
// parts with the state directory and the cache in the directory its parent names, which
// do not exist yet, as the site's first start does.
func TestFirstOpenChild(t *testing.T) {
	dir := crashpoint.Child(t)
	files := t.TempDir()
	cfg := Config{StateDir: filepath.Join(dir, "state"), Cache: CacheConfig{Dir: filepath.Join(dir, "cache")},
		Boot: boot.Config{Interface: "bc0", Mode: boot.Proxy, ServerIP: netip.MustParseAddr("10.0.0.1"), IPXEDir: files, RamdiskDir: files}}
	a, srv, err := open(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	a.cache.Close()
	srv.Close()
}

// TestNewStateDirIsSynced: the state directory the site's first start makes is fsynced
// in its parent, with the cache capability key it writes there: the key's write fsyncs
// the state directory, but the directory's name is its parent's, and a power loss that
// lost it would lose the key every boot script served since signs its cache URLs with.
func TestNewStateDirIsSynced(t *testing.T) {
	dir := t.TempDir()
	calls := crashpoint.Trace(t, "TestFirstOpenChild", dir)
	for _, path := range []string{filepath.Join(dir, "state"), filepath.Join(dir, "state", capKeyFile), filepath.Join(dir, "cache")} {
		crashpoint.SyncedDir(t, calls, path)
	}
}
