package lease

import (
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/better-compute/better-compute/testkit/crashpoint"
)

// TestNewLeaseFileChild is the child of TestNewLeaseFileNameIsSynced: it makes the lease
// file its parent names and stores a lease in it, as the first DHCPACK of a new site
// does.
func TestNewLeaseFileChild(t *testing.T) {
	s, err := Open(crashpoint.Child(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(Lease{MAC: "02:00:00:00:00:01", IP: netip.MustParseAddr("10.9.0.10"), Expiry: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
}

// TestNewLeaseFileNameIsSynced: a new lease file's directory is fsynced before Open
// returns, so before any lease in it is acknowledged. Each commit fsyncs the file, but
// its name is the directory's: a power loss that lost it would lose every lease given,
// and the next start would give their addresses to other machines.
func TestNewLeaseFileNameIsSynced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	crashpoint.SyncedDir(t, crashpoint.Trace(t, "TestNewLeaseFileChild", path), path)
	s := openStore(t, path)
	if all, err := s.All(); err != nil || len(all) != 1 {
		t.Fatalf("the child's lease file holds %v, %v; want its one lease", all, err)
	}
}
