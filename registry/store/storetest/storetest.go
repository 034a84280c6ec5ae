// Package storetest opens registry stores for tests: in the test's temporary directory
// (bbolt) or under a prefix of its own in a shared real etcd cluster (OpenEtcd), closed
// when the test ends after Store.Check found the store consistent, and, with Filled (or
// Fill, for a store opened elsewhere), holding the usual tenant, site and pool, where
// Node adds nodes. Backends runs a test on both.
package storetest

import (
	"fmt"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
)

// The usual tenant, site and pool Filled makes: pool Pool of tenant Tenant at site Site.
const (
	Tenant = "acme"
	Site   = "rack-a"
	Pool   = "gpu"
)

// Open opens a bbolt store with opts in a new temporary directory of t. When t ends, the
// store must pass Store.Check (the test fails otherwise) and is closed.
func Open(t testing.TB, opts store.Options) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir(), opts)
	return checked(t, st, err)
}

// OpenEtcd is Open on etcd: a new prefix in the test binary's shared three-member
// cluster (etcdtest.Shared; the package's TestMain should be etcdtest.Main).
func OpenEtcd(t testing.TB, opts store.Options) *store.Store {
	t.Helper()
	st, err := store.OpenEtcd(store.EtcdConfig{Endpoints: etcdtest.Shared(t).Endpoints, Prefix: etcdtest.Prefix(t)}, opts)
	return checked(t, st, err)
}

// Backends are the store backends, by name, for tests that run on each.
var Backends = []struct {
	Name string
	Open func(t testing.TB, opts store.Options) *store.Store
}{{"bbolt", Open}, {"etcd", OpenEtcd}}

// checked fails t on err, else checks and closes st when t ends.
func checked(t testing.TB, st *store.Store, err error) *store.Store {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Check(); err != nil {
			t.Errorf("the store is not consistent: %v", err)
		}
		st.Close()
	})
	return st
}

// Filled is Open, with tenant Tenant, site Site and pool Pool of Tenant at Site made.
func Filled(t testing.TB, opts store.Options) *store.Store {
	t.Helper()
	st := Open(t, opts)
	Fill(t, st)
	return st
}

// Fill makes tenant Tenant, site Site and pool Pool of Tenant at Site in st, however st
// was opened.
func Fill(t testing.TB, st *store.Store) {
	t.Helper()
	Update(t, st, func(tx *store.Tx) error {
		if _, err := tx.CreateTenant(Tenant); err != nil {
			return err
		}
		if _, err := tx.CreateSite(Site); err != nil {
			return err
		}
		_, err := tx.CreatePool(store.Pool{Tenant: Tenant, Name: Pool, Site: Site})
		return err
	})
}

// Node makes n in st, in pool Pool of Tenant where n names no tenant and pool, and
// returns it as stored (with its id).
func Node(t testing.TB, st *store.Store, n store.Node) store.Node {
	t.Helper()
	if n.Tenant == "" && n.Pool == "" {
		n.Tenant, n.Pool = Tenant, Pool
	}
	Update(t, st, func(tx *store.Tx) (err error) { n, err = tx.CreateNode(n); return err })
	return n
}

// Update runs fn in a read-write transaction of st and fails t when it fails.
func Update(t testing.TB, st *store.Store, fn func(*store.Tx) error) {
	t.Helper()
	if err := st.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// Located registers n images of the root tenant in tx, each of its own digest, and
// locates each ready at site, as a site cache's report does, and returns their ids in
// the order sites.locations lists them: by digest, the order they were made in.
func Located(tx *store.Tx, site string, n int) ([]string, error) {
	var ids []string
	for i := range n {
		img, err := tx.CreateImage(store.Image{Tenant: store.RootTenant, Ref: fmt.Sprintf("os@%d", i), Kind: proto.KindOS, Format: proto.FormatRaw,
			SHA256: fmt.Sprintf("%064x", i+1), Source: fmt.Sprintf("https://images.example.com/os-%d", i)})
		if err != nil {
			return nil, err
		}
		if _, err := tx.PutSiteLocation(store.SiteLocation{Site: site, Digest: img.SHA256, Source: img.Source, State: proto.CacheReady}); err != nil {
			return nil, err
		}
		ids = append(ids, img.ID)
	}
	return ids, nil
}

// ImageLocations is every location of an image at site in tx, as sites.locations lists
// them page after page (store.Tx.ImageLocationsPage).
func ImageLocations(tx *store.Tx, site string) ([]store.ImageLocation, error) {
	var all []store.ImageLocation
	for page := (store.Page{}); ; {
		locs, next, err := tx.ImageLocationsPage(site, page)
		if err != nil {
			return nil, err
		}
		all = append(all, locs...)
		if page.Cursor = next; next == "" {
			return all, nil
		}
	}
}
