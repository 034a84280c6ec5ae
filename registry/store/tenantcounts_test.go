package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// A counted kind as a test drives it: create makes the tenant's object i, stored says
// whether it is there, remove deletes it (nil: the kind has no delete).
type countedCase struct {
	kind   *countedKind
	path   string
	create func(tx *Tx, tenant string, i int) error
	stored func(tx *Tx, tenant string, i int) bool
	remove func(tx *Tx, tenant string, i int) error
}

var countedCases = []countedCase{
	{countSecrets, "ref",
		func(tx *Tx, tenant string, i int) error {
			_, err := tx.PutTenantSecret(Secret{Tenant: tenant, Ref: fmt.Sprintf("secret://s/%d", i), Sealed: make([]byte, 64<<10)})
			return err
		},
		func(tx *Tx, tenant string, i int) bool {
			_, ok, _ := tx.TenantSecret(tenant, fmt.Sprintf("secret://s/%d", i))
			return ok
		},
		func(tx *Tx, tenant string, i int) error {
			return tx.DeleteTenantSecret(tenant, fmt.Sprintf("secret://s/%d", i))
		}},
	{countImages, "ref",
		func(tx *Tx, tenant string, i int) error {
			_, err := tx.CreateImage(Image{Tenant: tenant, Ref: fmt.Sprintf("os@%d", i), Kind: proto.KindOS, SHA256: strings.Repeat("a", 64), Source: "https://images.example/os"})
			return err
		},
		func(tx *Tx, tenant string, i int) bool {
			_, err := tx.ImageByRef(tenant, fmt.Sprintf("os@%d", i))
			return err == nil
		}, nil},
	{countProfileVersions, "version",
		func(tx *Tx, tenant string, i int) error {
			_, err := tx.CreateProfile(ProfileRecord{Tenant: tenant, ID: "p", Version: i + 1, Document: profileDoc("p", i+1)})
			return err
		},
		func(tx *Tx, tenant string, i int) bool {
			_, ok, _ := tx.Profile(tenant, "p", i+1)
			return ok
		},
		// A deleted version no workflow used goes, and frees its place.
		func(tx *Tx, tenant string, i int) error {
			_, err := tx.DeleteProfile(tenant, "p", i+1)
			return err
		}},
}

// tenantCount is tenant's count of k as s holds it.
func tenantCount(t *testing.T, s *Store, k *countedKind, tenant string) int {
	t.Helper()
	var n int
	if err := s.View(func(tx *Tx) (err error) { n, err = tx.count(k, tenant); return err }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestATenantPastItsBoundIsRefused: a tenant (mallory) that holds its bound of secrets
// (of 64 KiB each), images or profile versions is refused one more, INVALID_STATE with
// reason quota at the field, naming the bound's flag, and nothing of it is stored; a
// replaced secret is no more and passes; another tenant (acme) is still served, and the
// root tenant is never refused; deleting a secret or a profile version no workflow used
// frees a place. Check finds each count right. Before, no kind had
// a bound: one tenant's credential filled the store every tenant shares.
func TestATenantPastItsBoundIsRefused(t *testing.T) {
	const bound = 3
	eachBackend(t, func(t *testing.T, open opener) {
		s := mustOpen(t, open, Options{Bounds: TenantBounds{Secrets: bound, Images: bound, ProfileVersions: bound}})
		mustUpdate(t, s, func(tx *Tx) error {
			for _, name := range []string{RootTenant, "mallory", "acme"} {
				if _, err := tx.CreateTenant(name); err != nil {
					return err
				}
			}
			return nil
		})
		for _, c := range countedCases {
			t.Run(c.kind.name, func(t *testing.T) {
				create := func(tenant string, i int) error {
					return s.Update(func(tx *Tx) error { return c.create(tx, tenant, i) })
				}
				stored := func(tenant string, i int) (ok bool) {
					if err := s.View(func(tx *Tx) error { ok = c.stored(tx, tenant, i); return nil }); err != nil {
						t.Fatal(err)
					}
					return ok
				}
				refused := func(i int) {
					t.Helper()
					err := create("mallory", i)
					pe, _ := errors.AsType[*proto.Error](err)
					if proto.CodeOf(err) != proto.InvalidState || pe == nil || pe.Details.Reason != proto.ReasonQuota || pe.Details.Path != c.path ||
						!strings.Contains(err.Error(), fmt.Sprintf("holds %d %s", bound, c.kind.name)) || !strings.Contains(err.Error(), c.kind.flag) {
						t.Fatalf("mallory's object %d past its bound: %v, want INVALID_STATE quota at %s naming %s", i, err, c.path, c.kind.flag)
					}
					if stored("mallory", i) {
						t.Fatalf("mallory's refused object %d is stored", i)
					}
					if n := tenantCount(t, s, c.kind, "mallory"); n != bound {
						t.Fatalf("mallory's count after a refusal: %d, want %d", n, bound)
					}
				}
				for i := range bound {
					if err := create("mallory", i); err != nil {
						t.Fatalf("mallory's object %d within its bound: %v", i, err)
					}
				}
				refused(bound)
				if c.kind == countSecrets {
					if err := create("mallory", 0); err != nil {
						t.Fatalf("mallory's secret replaced at its bound: %v", err)
					}
				}
				if err := create("acme", 0); err != nil || !stored("acme", 0) {
					t.Fatalf("another tenant's object beside mallory at its bound: %v", err)
				}
				for i := range bound + 1 {
					if err := create(RootTenant, i); err != nil {
						t.Fatalf("the root tenant's object %d: %v, want it never refused", i, err)
					}
				}
				if c.remove != nil {
					mustUpdate(t, s, func(tx *Tx) error { return c.remove(tx, "mallory", 1) })
					if err := create("mallory", bound); err != nil {
						t.Fatalf("mallory's object after it deleted one: %v", err)
					}
					refused(bound + 1)
				}
				mustCheck(t, s, "the bounds")
				for tenant, want := range map[string]int{"mallory": bound, "acme": 1, RootTenant: bound + 1} {
					if n := tenantCount(t, s, c.kind, tenant); n != want {
						t.Errorf("%s's count of %s: %d, want %d", tenant, c.kind.name, n, want)
					}
				}
			})
		}
		// Deleting every version of mallory's profile, none of them used, frees every place.
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.DeleteProfile("mallory", "p", 0); return err })
		if n := tenantCount(t, s, countProfileVersions, "mallory"); n != 0 {
			t.Errorf("mallory's count of profile versions after it deleted every one: %d, want 0", n)
		}
		if err := s.Update(func(tx *Tx) error { return countedCases[2].create(tx, "mallory", 9) }); err != nil {
			t.Fatalf("a profile version after mallory deleted every one: %v", err)
		}
		mustCheck(t, s, "deleting the profile")
	})
}

// TestTenantCountsAreFilledAndCorrected: a store of format 3 (no counts, as an earlier
// release left it) opened read-only is checked as it is; opened, it is raised to Format
// with every tenant's count of every kind, and the bound then refuses the object past
// what the tenant held before the raise. A count left wrong (and one of a tenant that
// holds none) is reported by Check and corrected at the next open.
func TestTenantCountsAreFilledAndCorrected(t *testing.T) {
	eachPlace(t, func(t *testing.T, open opener) {
		opts := Options{Bounds: TenantBounds{Secrets: 2, Images: 2, ProfileVersions: 2}}
		s := mustOpen(t, open, opts)
		mustUpdate(t, s, func(tx *Tx) error {
			for _, name := range []string{"mallory", "acme"} {
				if _, err := tx.CreateTenant(name); err != nil {
					return err
				}
			}
			for _, c := range countedCases {
				for i := range 2 {
					if err := c.create(tx, "mallory", i); err != nil {
						return err
					}
				}
				if err := c.create(tx, "acme", 0); err != nil {
					return err
				}
			}
			return nil
		})
		dropCounts := func() {
			mustUpdate(t, s, func(tx *Tx) error {
				for _, c := range countedCases {
					for _, tenant := range []string{"mallory", "acme"} {
						if err := tx.del(bucketTenantCounts, countKey(c.kind, tenant)); err != nil {
							return err
						}
					}
				}
				return nil
			})
		}
		dropCounts()
		setFormat(t, s, formatValue(formatTenantCounts-1))
		s.Close()
		ro := mustOpen(t, open, Options{ReadOnly: true})
		mustCheck(t, ro, "read-only at format 3")
		ro.Close()

		s = mustOpen(t, open, opts)
		if got := storedFormat(t, s); got != fmt.Sprint(Format) {
			t.Fatalf("format after the raise: %s, want %d", got, Format)
		}
		mustCheck(t, s, "the raise")
		for _, c := range countedCases {
			if err := s.Update(func(tx *Tx) error { return c.create(tx, "mallory", 2) }); proto.CodeOf(err) != proto.InvalidState {
				t.Errorf("mallory's %s past the bound after the raise: %v, want INVALID_STATE", c.kind.name, err)
			}
			if err := s.Update(func(tx *Tx) error { return c.create(tx, "acme", 1) }); err != nil {
				t.Errorf("acme's second %s after the raise: %v", c.kind.name, err)
			}
		}

		dropCounts()
		mustUpdate(t, s, func(tx *Tx) error {
			return tx.putRaw(bucketTenantCounts, countKey(countSecrets, "nobody"), []byte("7"))
		})
		err := s.Check()
		for _, want := range []string{`"secrets\x00mallory"`, `"images\x00acme"`, `"secrets\x00nobody"`} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Check with counts wrong: %v, want it to name %s", err, want)
			}
		}
		s.Close()
		s = mustOpen(t, open, opts)
		mustCheck(t, s, "the open after counts went wrong")
		if n := tenantCount(t, s, countProfileVersions, "acme"); n != 2 {
			t.Errorf("acme's profile versions counted at open: %d, want 2", n)
		}
	})
}
