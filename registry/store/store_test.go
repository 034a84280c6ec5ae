package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/google/go-cmp/cmp"
)

// openTest opens a store with open (with the first of opts, if any) and closes it when
// the test ends, after checking it is consistent.
func openTest(t *testing.T, open opener, opts ...Options) *Store {
	t.Helper()
	s, err := open(t, append(opts, Options{})[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Check(); err != nil {
			t.Errorf("the store is not consistent: %v", err)
		}
		s.Close()
	})
	return s
}

func TestOpenTwiceIsLocked(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Open(dir, Options{LockTimeout: 50_000_000}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: got %v, want ErrLocked", err)
	}
}

func TestReopenKeepsCommittedWrites(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(func(tx *Tx) error { _, err := tx.CreateTenant("acme"); return err }); err != nil {
		t.Fatal(err)
	}
	// A failed transaction leaves nothing behind.
	boom := errors.New("boom")
	if err := s.Update(func(tx *Tx) error {
		if _, err := tx.CreateTenant("lost"); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	s.Close()
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.View(func(tx *Tx) error {
		if _, err := tx.Tenant("acme"); err != nil {
			t.Errorf("acme after reopen: %v", err)
		}
		if _, err := tx.Tenant("lost"); proto.CodeOf(err) != proto.NotFound {
			t.Errorf("lost after reopen: got %v, want NOT_FOUND", err)
		}
		return nil
	})
}

func TestTenantRules(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		cases := map[string]struct {
			name string
			code proto.Code
		}{
			"ok":          {"acme-1", ""},
			"upper case":  {"Acme", proto.InvalidInput},
			"empty":       {"", proto.InvalidInput},
			"builtin":     {"builtin", proto.InvalidInput},
			"digit first": {"1acme", proto.InvalidInput},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				err := s.Update(func(tx *Tx) error { _, err := tx.CreateTenant(tc.name); return err })
				if tc.code == "" && err != nil || tc.code != "" && proto.CodeOf(err) != tc.code {
					t.Fatalf("got %v, want %q", err, tc.code)
				}
			})
		}
		err := s.Update(func(tx *Tx) error { _, err := tx.CreateTenant("acme-1"); return err })
		if proto.CodeOf(err) != proto.Conflict {
			t.Fatalf("duplicate: got %v, want CONFLICT", err)
		}
	})
}

func TestCredentialsAuthenticate(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		var bearer string
		var made Credential
		if err := s.Update(func(tx *Tx) (err error) {
			if _, err = tx.CreateTenant("acme"); err != nil {
				return err
			}
			made, bearer, err = tx.CreateCredential("acme", []string{"compute:profiles:read"}, time.Time{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		s.View(func(tx *Tx) error {
			got, err := tx.Authenticate(bearer)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(made, got); diff != "" {
				t.Errorf("credential (-made +got):\n%s", diff)
			}
			for name, bad := range map[string]string{
				"empty":        "",
				"no prefix":    bearer[4:],
				"wrong secret": forged(bearer),
				"unknown id":   "bcc_0000000000000000.AAAA",
				"no dot":       "bcc_abc",
			} {
				if _, err := tx.Authenticate(bad); proto.CodeOf(err) != proto.Unauthenticated {
					t.Errorf("%s: got %v, want UNAUTHENTICATED", name, err)
				}
			}
			return nil
		})
		if err := s.Update(func(tx *Tx) error { _, _, err := tx.CreateCredential("nobody", nil, time.Time{}); return err }); proto.CodeOf(err) != proto.NotFound {
			t.Fatalf("credential of a missing tenant: got %v", err)
		}
	})
}

func TestScanPages(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		s.Update(func(tx *Tx) error {
			for i := range 450 {
				if _, err := tx.CreateTenant(fmt.Sprintf("t%04d", i)); err != nil {
					return err
				}
			}
			return nil
		})
		var all []string
		cursor := ""
		pages := 0
		for {
			var got []Tenant
			var err error
			s.View(func(tx *Tx) error { got, cursor, err = tx.Tenants(Page{Cursor: cursor}); return nil })
			if err != nil {
				t.Fatal(err)
			}
			if len(got) > MaxPage {
				t.Fatalf("page of %d", len(got))
			}
			pages++
			for _, tn := range got {
				all = append(all, tn.ID)
			}
			if cursor == "" {
				break
			}
		}
		if len(all) != 450 || pages != 3 {
			t.Fatalf("got %d tenants in %d pages, want 450 in 3", len(all), pages)
		}
		for i := range all {
			if all[i] != fmt.Sprintf("t%04d", i) {
				t.Fatalf("item %d is %s", i, all[i])
			}
		}
		s.View(func(tx *Tx) error {
			if _, _, err := tx.Tenants(Page{Cursor: "!!"}); proto.CodeOf(err) != proto.InvalidInput {
				t.Errorf("bad cursor: got %v", err)
			}
			return nil
		})
	})
}
