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

// TestCheckProfiles checks that Check reads the profiles' records by the schema and
// holds profiles_public to what the records say: an entry for each stored, undeleted,
// public version and none other.
func TestCheckProfiles(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, err := open(t, Options{}) // not openTest: this store is damaged on purpose
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		err = s.Update(func(tx *Tx) error {
			for _, p := range []ProfileRecord{
				{Tenant: "acme", ID: "shown", Version: 1, Visibility: Public},
				{Tenant: "acme", ID: "shown", Version: 2, Visibility: Public},
				{Tenant: "acme", ID: "own", Version: 1, Visibility: Private},
				{Tenant: "acme", ID: "hidden", Version: 1, Visibility: Public},
			} {
				p.Document = json.RawMessage(`{"steps":[{"uses":"wipe <&>"}]}`)
				if _, err := tx.CreateProfile(p); err != nil {
					return err
				}
			}
			if _, err := tx.SetProfileVisibility("acme", "shown", 2, 0, Private); err != nil {
				return err
			}
			// Used by a workflow, so that its record stays deleted.
			if err := tx.MarkProfileUsed("acme", "hidden", 1); err != nil {
				return err
			}
			_, err := tx.DeleteProfile("acme", "hidden", 1)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Check(); err != nil {
			t.Fatalf("a store written through its write paths: %v", err)
		}
		err = s.Update(func(tx *Tx) error {
			for _, k := range [][]byte{
				publicKey("shown", 2, "acme"),  // a private version
				publicKey("hidden", 1, "acme"), // a deleted version
				publicKey("gone", 1, "acme"),   // no such version
				[]byte("junk"),
			} {
				if err := tx.putRaw(bucketPublicProfiles, k, nil); err != nil {
					return err
				}
			}
			if err := tx.del(bucketPublicProfiles, publicKey("shown", 1, "acme")); err != nil {
				return err
			}
			return tx.putRaw(bucketProfiles, profileKey("acme", "odd", 1), []byte(`{"id":"odd"}`))
		})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Check()
		for _, want := range []string{
			`profiles_public/"shown\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00acme" names profile shown@2 of tenant acme, which is private`,
			`profiles_public/"hidden\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00acme" names profile hidden@1 of tenant acme, which is deleted`,
			`profiles_public/"gone\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00acme" names profile gone@1 of tenant acme, which is not stored`,
			`profiles_public/"junk" is not an entry of id, version and tenant`,
			`profile shown@1 of tenant acme is public but has no profiles_public entry`,
			`profiles/"acme\x00odd\x00\x00\x00\x00\x00\x00\x00\x00\x01" is not a record of schema`,
		} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Check of a damaged store: %v\nwant it to say %s", err, want)
			}
		}
	})
}
