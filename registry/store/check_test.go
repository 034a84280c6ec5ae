package store

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCheck checks that a store filled through its write paths is consistent, and that
// Check finds an index entry whose record is gone and a record of another schema.
func TestCheck(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, err := open(t, Options{}) // not openTest: this store is damaged on purpose
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		fillForCheck(t, s)
		if err := s.Check(); err != nil {
			t.Fatalf("a store written through its write paths: %v", err)
		}
		err = s.Update(func(tx *Tx) error {
			if err := tx.putRaw(bucketPoolsBySite, []byte("rack-a\x00acme\x00gone"), nil); err != nil {
				return err
			}
			if err := tx.putRaw(bucketNodesByBMC, []byte("rack-a\x0010.20.0.5\x00nd_gone"), []byte("acme")); err != nil {
				return err
			}
			return tx.putRaw(bucketSites, []byte("rack-b"), []byte(`{"id":"rack-b"}`))
		})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Check()
		if err == nil || !strings.Contains(err.Error(), `pools_by_site/"rack-a\x00acme\x00gone" names pools/"acme\x00gone"`) ||
			!strings.Contains(err.Error(), `nodes_by_bmc/"rack-a\x0010.20.0.5\x00nd_gone" names nodes/"nd_gone"`) ||
			!strings.Contains(err.Error(), `sites/"rack-b" is not a record`) {
			t.Fatalf("got %v, want the dangling index entries and the record of another schema", err)
		}
	})
}

// fillForCheck writes a tenant, site, pool, node, image and run through the write paths.
func fillForCheck(t *testing.T, s *Store) {
	t.Helper()
	err := s.Update(func(tx *Tx) error {
		if _, err := tx.CreateTenant("acme"); err != nil {
			return err
		}
		if _, err := tx.CreateSite("rack-a"); err != nil {
			return err
		}
		if _, err := tx.CreatePool(Pool{Tenant: "acme", Name: "gpu", Site: "rack-a"}); err != nil {
			return err
		}
		if _, err := tx.CreateNode(Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}, ProductUUID: "4c4c4544-0000-1000-8000-000000000001",
			BMC: BMC{Driver: "redfish", Address: "https://10.20.0.5"}}); err != nil {
			return err
		}
		if _, err := tx.CreateImage(testImage("acme", "os@1", true)); err != nil {
			return err
		}
		_, err := tx.CreateRun(Run{Kind: "deploy", Node: "nd_1", Document: json.RawMessage(`{}`), Steps: []RunStep{{Phase: "main", Index: 0}}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
