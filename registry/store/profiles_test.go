package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

func mustUpdate(t *testing.T, s *Store, fn func(tx *Tx) error) {
	t.Helper()
	if err := s.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func profileDoc(id string, v int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"id":%q,"version":%d}`, id, v))
}

func TestProfileLifecycle(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		mustUpdate(t, s, func(tx *Tx) error {
			for _, v := range []int{1, 2, 3} {
				if _, err := tx.CreateProfile(ProfileRecord{Tenant: "acme", ID: "gpu", Version: v, Document: profileDoc("gpu", v)}); err != nil {
					return err
				}
			}
			return nil
		})
		s.Update(func(tx *Tx) error {
			if _, err := tx.CreateProfile(ProfileRecord{Tenant: "acme", ID: "gpu", Version: 2}); proto.CodeOf(err) != proto.Conflict {
				t.Errorf("existing version: got %v, want CONFLICT", err)
			}
			latest, ok, err := tx.LatestProfile("acme", "gpu")
			if err != nil || !ok || latest.Version != 3 {
				t.Errorf("latest: %+v %v %v", latest.Version, ok, err)
			}
			// A guard on the row version.
			if _, err := tx.ReplaceProfileDocument("acme", "gpu", 3, 7, profileDoc("gpu", 3)); proto.CodeOf(err) != proto.Conflict {
				t.Errorf("stale --if-version: got %v", err)
			}
			rec, err := tx.ReplaceProfileDocument("acme", "gpu", 3, 1, profileDoc("gpu", 3))
			if err != nil || rec.Rev != 2 {
				t.Errorf("replace: rev %d, %v", rec.Rev, err)
			}
			// Used versions are immutable, but may change visibility.
			if err := tx.MarkProfileUsed("acme", "gpu", 3); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ReplaceProfileDocument("acme", "gpu", 3, 0, profileDoc("gpu", 3)); proto.CodeOf(err) != proto.InvalidState {
				t.Errorf("replace a used version: got %v, want INVALID_STATE", err)
			}
			if _, err := tx.SetProfileVisibility("acme", "gpu", 3, 0, Public); err != nil {
				t.Errorf("visibility of a used version: %v", err)
			}
			// Deleting the latest falls back to the one before.
			if _, err := tx.DeleteProfile("acme", "gpu", 3); err != nil {
				t.Fatal(err)
			}
			if latest, _, _ := tx.LatestProfile("acme", "gpu"); latest.Version != 2 {
				t.Errorf("latest after delete: %d, want 2", latest.Version)
			}
			if _, ok, _ := tx.PublicProfile("acme", "gpu", 0); ok {
				t.Errorf("a deleted version is still public")
			}
			if _, err := tx.CreateProfile(ProfileRecord{Tenant: "acme", ID: "gpu", Version: 3}); proto.CodeOf(err) != proto.Conflict {
				t.Errorf("reuse of a deleted version: got %v, want CONFLICT", err)
			}
			hid, err := tx.DeleteProfile("acme", "gpu", 0)
			if err != nil || len(hid) != 2 {
				t.Errorf("delete all: %v %v", hid, err)
			}
			if _, err := tx.DeleteProfile("acme", "gpu", 0); proto.CodeOf(err) != proto.NotFound {
				t.Errorf("delete again: got %v", err)
			}
			return nil
		})
	})
}

func TestPublicProfileIsTheOwnersHighestPublicVersion(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		mustUpdate(t, s, func(tx *Tx) error {
			for _, r := range []ProfileRecord{
				{Tenant: "b", ID: "x", Version: 1, Visibility: Public},
				{Tenant: "a", ID: "x", Version: 2, Visibility: Public},
				{Tenant: "c", ID: "x", Version: 4, Visibility: Public},
				{Tenant: "a", ID: "x", Version: 3, Visibility: Private},
				{Tenant: "a", ID: "xy", Version: 9, Visibility: Public},
			} {
				if _, err := tx.CreateProfile(r); err != nil {
					return err
				}
			}
			return nil
		})
		s.View(func(tx *Tx) error {
			rec, ok, err := tx.PublicProfile("a", "x", 0)
			if err != nil || !ok || rec.Version != 2 || rec.Tenant != "a" {
				t.Errorf("latest public a/x: %s@%d from %s, %v %v", rec.ID, rec.Version, rec.Tenant, ok, err)
			}
			if rec, ok, _ := tx.PublicProfile("b", "x", 1); !ok || rec.Tenant != "b" {
				t.Errorf("public b/x@1: %+v", rec)
			}
			for _, miss := range []struct {
				owner   string
				version int
			}{{"a", 1}, {"a", 3}, {"a", 4}, {"b", 2}, {"d", 0}} {
				if rec, ok, _ := tx.PublicProfile(miss.owner, "x", miss.version); ok {
					t.Errorf("%s/x@%d: got %s's version %d", miss.owner, miss.version, rec.Tenant, rec.Version)
				}
			}
			return nil
		})
	})
}

func TestListProfilesPhasesAndPages(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		mustUpdate(t, s, func(tx *Tx) error {
			for i := range 250 {
				if _, err := tx.CreateProfile(ProfileRecord{Tenant: "acme", ID: fmt.Sprintf("own-%03d", i), Version: 1}); err != nil {
					return err
				}
			}
			for i := range 30 {
				vis := Public
				if i%2 == 1 {
					vis = Private
				}
				if _, err := tx.CreateProfile(ProfileRecord{Tenant: "other", ID: fmt.Sprintf("theirs-%02d", i), Version: 1, Visibility: vis}); err != nil {
					return err
				}
			}
			_, err := tx.DeleteProfile("acme", "own-000", 1)
			return err
		})
		shipped := make([]ProfileRecord, 160)
		for i := range shipped {
			shipped[i] = ProfileRecord{Tenant: BuiltinTenant, ID: fmt.Sprintf("ship-%03d", i), Version: 1}
		}
		var got []ProfileRecord
		cursor, pages := "", 0
		for {
			var page []ProfileRecord
			var err error
			s.View(func(tx *Tx) error {
				page, cursor, err = tx.ListProfiles("acme", shipped, Page{Cursor: cursor})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > MaxPage {
				t.Fatalf("page of %d", len(page))
			}
			got = append(got, page...)
			pages++
			if cursor == "" {
				break
			}
		}
		// 249 own (one deleted) + 15 public of another tenant + 160 shipped.
		if len(got) != 249+15+160 || pages != 3 {
			t.Fatalf("got %d profiles in %d pages", len(got), pages)
		}
		seen := map[string]bool{}
		for _, r := range got {
			key := r.Tenant + "/" + r.ID
			if seen[key] {
				t.Fatalf("%s listed twice", key)
			}
			seen[key] = true
			if r.Tenant == "other" && r.Visibility != Public {
				t.Fatalf("private profile of another tenant listed: %s", key)
			}
		}
		if got[0].ID != "own-001" || got[249].Tenant != "other" || got[264].Tenant != BuiltinTenant {
			t.Errorf("order: %s %s %s", got[0].ID, got[249].Tenant, got[264].Tenant)
		}
	})
}

// TestDeleteEveryVersionOfLargeProfiles: a profile of two versions of the largest
// document, one public, is deleted whole in one transaction, on a cluster of etcd's
// defaults too: each version is hidden from lookups, lists and the public index, keeps
// its record as it was, and its number stays taken. Before, the delete rewrote each
// version's record, 2 MiB in one request, which etcd refuses by default. A version a
// registry of an earlier version hid in its record stays hidden.
func TestDeleteEveryVersionOfLargeProfiles(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		doc := func(v int) json.RawMessage {
			head := fmt.Sprintf(`{"id":"gpu","version":%d,"pad":"`, v)
			return json.RawMessage(head + strings.Repeat("<&>", (proto.MaxProfileDocument-len(head)-2)/3) + `"}`)
		}
		// Both used by a workflow, so that their records stay.
		for v, vis := range map[int]string{1: Public, 2: Private} {
			mustUpdate(t, s, func(tx *Tx) error {
				if _, err := tx.CreateProfile(ProfileRecord{Tenant: "acme", ID: "gpu", Version: v, Visibility: vis, Document: doc(v)}); err != nil {
					return err
				}
				return tx.MarkProfileUsed("acme", "gpu", v)
			})
		}
		// A version hidden as a registry of an earlier version hid it: in its record,
		// counted as the raise to format 4 counts it.
		mustUpdate(t, s, func(tx *Tx) error {
			if err := tx.putProfile(ProfileRecord{Tenant: "acme", ID: "older", Version: 1, Visibility: Private, Document: profileDoc("older", 1), Rev: 2, Deleted: true}); err != nil {
				return err
			}
			return tx.recount([][]byte{countKey(countProfileVersions, "acme")})
		})
		var hid []int
		if err := s.Update(func(tx *Tx) (err error) { hid, err = tx.DeleteProfile("acme", "gpu", 0); return err }); err != nil {
			t.Fatalf("deleting both versions of 1 MiB: %v", err)
		}
		if !slices.Equal(hid, []int{1, 2}) {
			t.Errorf("hid %v, want versions 1 and 2", hid)
		}
		s.View(func(tx *Tx) error {
			for _, v := range []int{1, 2} {
				rec, ok, err := tx.Profile("acme", "gpu", v)
				if err != nil || !ok || !rec.Deleted || rec.Rev != 1 || !bytes.Equal(rec.Document, doc(v)) {
					t.Errorf("version %d: deleted %t, rev %d, its document kept %t, %v", v, rec.Deleted, rec.Rev, bytes.Equal(rec.Document, doc(v)), err)
				}
			}
			if rec, ok, _ := tx.LatestProfile("acme", "gpu"); ok {
				t.Errorf("the latest version of a deleted profile: %d", rec.Version)
			}
			if _, ok, _ := tx.PublicProfile("acme", "gpu", 0); ok {
				t.Errorf("a deleted version is still public")
			}
			if rec, ok, _ := tx.LatestProfile("acme", "older"); ok {
				t.Errorf("a version deleted in its record reads as not deleted: %d", rec.Version)
			}
			list, _, err := tx.ListProfiles("acme", nil, Page{})
			if err != nil || len(list) != 0 {
				t.Errorf("the list after the delete: %d versions, %v", len(list), err)
			}
			if _, err := tx.DeleteProfile("acme", "gpu", 0); proto.CodeOf(err) != proto.NotFound {
				t.Errorf("deleting again: %v, want NOT_FOUND", err)
			}
			return nil
		})
		err := s.Update(func(tx *Tx) error {
			_, err := tx.CreateProfile(ProfileRecord{Tenant: "acme", ID: "gpu", Version: 2, Document: profileDoc("gpu", 2)})
			return err
		})
		if proto.CodeOf(err) != proto.Conflict {
			t.Errorf("reusing a deleted version: %v, want CONFLICT", err)
		}
	})
}

// TestADeletedVersionFreesItsPlaceNotItsNumber: a tenant at its bound of profile
// versions that deletes one no workflow used defines another (before, the deleted
// version's record stayed, counted, and the tenant was refused quota for good); the
// deleted number is never given again (CONFLICT at version), whichever way it was
// deleted, and the next versions go on above it. A deleted version a workflow used keeps
// its record, for its runs, and its place. Check finds the store whole.
func TestADeletedVersionFreesItsPlaceNotItsNumber(t *testing.T) {
	const bound = 3
	eachBackend(t, func(t *testing.T, open opener) {
		s := mustOpen(t, open, Options{Bounds: TenantBounds{ProfileVersions: bound}})
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.CreateTenant("acme"); return err })
		create := func(v int) error {
			return s.Update(func(tx *Tx) error {
				_, err := tx.CreateProfile(ProfileRecord{Tenant: "acme", ID: "gpu", Version: v, Visibility: Public, Document: profileDoc("gpu", v)})
				return err
			})
		}
		del := func(v int) {
			t.Helper()
			mustUpdate(t, s, func(tx *Tx) error { _, err := tx.DeleteProfile("acme", "gpu", v); return err })
		}
		quota := func(v int) {
			t.Helper()
			if pe, _ := errors.AsType[*proto.Error](create(v)); pe == nil || pe.Details.Reason != proto.ReasonQuota || pe.Details.Path != "version" {
				t.Fatalf("version %d past the bound: %v, want INVALID_STATE quota at version", v, pe)
			}
		}
		for v := 1; v <= bound; v++ {
			if err := create(v); err != nil {
				t.Fatal(err)
			}
		}
		quota(bound + 1)
		del(2)
		if err := create(bound + 1); err != nil {
			t.Fatalf("a version after one unused was deleted at the bound: %v", err)
		}
		for _, v := range []int{2, bound + 1} {
			err := create(v)
			if pe, _ := errors.AsType[*proto.Error](err); proto.CodeOf(err) != proto.Conflict || pe.Details.Path != "version" {
				t.Errorf("version %d again: %v, want CONFLICT at version", v, err)
			}
		}
		// A version a workflow used, deleted, stays for its runs, and holds its place.
		mustUpdate(t, s, func(tx *Tx) error { return tx.MarkProfileUsed("acme", "gpu", 1) })
		del(1)
		quota(bound + 2)
		del(0) // versions 3 and 4, unused
		if n := tenantCount(t, s, countProfileVersions, "acme"); n != 1 {
			t.Errorf("acme's count after every version was deleted: %d, want 1 (the used one)", n)
		}
		s.View(func(tx *Tx) error {
			rec, ok, err := tx.Profile("acme", "gpu", 1)
			if err != nil || !ok || !rec.Deleted || !bytes.Equal(rec.Document, profileDoc("gpu", 1)) {
				t.Errorf("the deleted used version: stored %t, deleted %t, %v; want its record kept", ok, rec.Deleted, err)
			}
			for _, v := range []int{2, 3, 4} {
				if _, ok, _ := tx.Profile("acme", "gpu", v); ok {
					t.Errorf("the deleted unused version %d is still stored", v)
				}
			}
			if list, _, err := tx.ListProfiles("acme", nil, Page{}); err != nil || len(list) != 0 {
				t.Errorf("the list after the deletes: %d versions, %v", len(list), err)
			}
			if _, err := tx.DeleteProfile("acme", "gpu", 3); proto.CodeOf(err) != proto.NotFound {
				t.Errorf("deleting version 3 again: %v, want NOT_FOUND", err)
			}
			return nil
		})
		for _, v := range []int{1, 2, 3, 4} {
			if err := create(v); proto.CodeOf(err) != proto.Conflict {
				t.Errorf("deleted version %d again: %v, want CONFLICT", v, err)
			}
		}
		if err := create(5); err != nil {
			t.Errorf("the next version: %v", err)
		}
		mustCheck(t, s, "deleting versions")
	})
}
