package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
)

// A counted kind as a test drives it: create makes the tenant's object i, stored says
// whether it is there, remove deletes it (nil: the kind has no delete). The pools go at
// site countedSite; the nodes in each tenant's pool p0, which the pools case makes
// first.
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
	// A revoked credential stays stored, and counted, until it is pruned
	// (TestAPrunedCredentialFreesItsPlace); the ids are random, so the tenant's object i
	// is stored when it holds more than i.
	{countCredentials, "tenantId",
		func(tx *Tx, tenant string, _ int) error {
			_, _, err := tx.CreateCredential(tenant, []string{"compute:nodes:read"}, time.Time{})
			return err
		},
		func(tx *Tx, tenant string, i int) bool {
			creds, _, _ := tx.Credentials(tenant, Page{})
			return len(creds) > i
		}, nil},
	{countPools, "name",
		func(tx *Tx, tenant string, i int) error {
			_, err := tx.CreatePool(Pool{Tenant: tenant, Name: fmt.Sprintf("p%d", i), Site: countedSite})
			return err
		},
		func(tx *Tx, tenant string, i int) bool {
			_, err := tx.Pool(tenant, fmt.Sprintf("p%d", i))
			return err == nil
		}, nil},
	// A retired node stays stored, and counted.
	{countNodes, "pool",
		func(tx *Tx, tenant string, i int) error {
			_, err := tx.CreateNode(Node{Tenant: tenant, Pool: "p0", MACs: []string{countedMAC(tenant, i)}})
			return err
		},
		func(tx *Tx, tenant string, i int) bool {
			nodes, _, _ := tx.Nodes(tenant, "", "", Page{})
			return len(nodes) > i
		}, nil},
}

// countedSite is the site of the counted pools, made by makeCountedTenants.
const countedSite = "rack-a"

// countedMAC is the MAC of tenant's node i of the counted cases (i < 256), another
// for every tenant and i.
func countedMAC(tenant string, i int) string {
	return fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", tenant[0], tenant[1], tenant[2], tenant[3], i)
}

// makeCountedTenants makes tenants and the site of the counted pools.
func makeCountedTenants(t *testing.T, s *Store, tenants ...string) {
	t.Helper()
	mustUpdate(t, s, func(tx *Tx) error {
		for _, name := range tenants {
			if _, err := tx.CreateTenant(name); err != nil {
				return err
			}
		}
		_, err := tx.CreateSite(countedSite)
		return err
	})
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
// (of 64 KiB each), images, profile versions, credentials, pools or nodes is refused one
// more, INVALID_STATE with reason quota at the field, naming the bound's flag, and
// nothing of it is stored; a replaced secret is no more and passes; another tenant
// (acme) is still served, and the root tenant is never refused, nor the platform
// enrolling a machine for mallory, which counts it; deleting a secret or a profile version no
// workflow used frees a place. Check finds each count right.
// Before, no kind had a bound: one tenant's credential filled the store every tenant
// shares (credentials, pools and nodes until this release).
func TestATenantPastItsBoundIsRefused(t *testing.T) {
	const bound = 3
	eachBackend(t, func(t *testing.T, open opener) {
		s := mustOpen(t, open, Options{Bounds: TenantBounds{Secrets: bound, Images: bound, ProfileVersions: bound, Credentials: bound, Pools: bound, Nodes: bound}})
		makeCountedTenants(t, s, RootTenant, "mallory", "acme")
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
		// The platform enrolling a machine for mallory at its bound is served, and counted:
		// mallory's own enrollment is still refused.
		mustUpdate(t, s, func(tx *Tx) error {
			_, err := tx.CreateNode(Node{Tenant: "mallory", Pool: "p0", MACs: []string{countedMAC("mallory", 100)}, PlatformBMC: true})
			return err
		})
		if n := tenantCount(t, s, countNodes, "mallory"); n != bound+1 {
			t.Errorf("mallory's count of nodes after the platform enrolled one past its bound: %d, want %d", n, bound+1)
		}
		if err := s.Update(func(tx *Tx) error { return countedCases[5].create(tx, "mallory", 101) }); proto.CodeOf(err) != proto.InvalidState {
			t.Errorf("mallory's own node past its bound after the platform's: %v, want INVALID_STATE", err)
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
// release left it), or of format 4 (counting secrets, images and profile versions only),
// opened read-only is checked as it is; opened, it is raised to Format with every
// tenant's count of every kind, and the bound then refuses the object past what the
// tenant held before the raise. A count left wrong (and one of a tenant that holds none)
// is reported by Check and corrected at the next open.
func TestTenantCountsAreFilledAndCorrected(t *testing.T) {
	for _, from := range []int{formatTenantCounts - 1, formatTenantCounts} {
		t.Run(fmt.Sprintf("format %d", from), func(t *testing.T) {
			eachPlace(t, func(t *testing.T, open opener) {
				countsFilledAndCorrected(t, open, from)
			})
		})
	}
}

func countsFilledAndCorrected(t *testing.T, open opener, from int) {
	opts := Options{Bounds: TenantBounds{Secrets: 2, Images: 2, ProfileVersions: 2, Credentials: 2, Pools: 2, Nodes: 2}}
	s := mustOpen(t, open, opts)
	makeCountedTenants(t, s, "mallory", "acme")
	mustUpdate(t, s, func(tx *Tx) error {
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
	// dropCounts deletes the counts of the kinds a store of format f does not count.
	dropCounts := func(f int) {
		mustUpdate(t, s, func(tx *Tx) error {
			for _, c := range countedCases {
				for _, tenant := range []string{"mallory", "acme"} {
					if c.kind.since <= f {
						continue
					}
					if err := tx.del(bucketTenantCounts, countKey(c.kind, tenant)); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	dropCounts(from)
	setFormat(t, s, formatValue(from))
	s.Close()
	ro := mustOpen(t, open, Options{ReadOnly: true})
	mustCheck(t, ro, fmt.Sprintf("read-only at format %d", from))
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

	dropCounts(0)
	mustUpdate(t, s, func(tx *Tx) error {
		return tx.putRaw(bucketTenantCounts, countKey(countSecrets, "nobody"), []byte("7"))
	})
	err := s.Check()
	for _, want := range []string{`"secrets\x00mallory"`, `"images\x00acme"`, `"credentials\x00acme"`, `"nodes\x00mallory"`, `"secrets\x00nobody"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check with counts wrong: %v, want it to name %s", err, want)
		}
	}
	s.Close()
	s = mustOpen(t, open, opts)
	mustCheck(t, s, "the open after counts went wrong")
	for _, k := range []*countedKind{countProfileVersions, countCredentials, countPools} {
		if n := tenantCount(t, s, k, "acme"); n != 2 {
			t.Errorf("acme's %s counted at open: %d, want 2", k.name, n)
		}
	}
}

// TestAPrunedCredentialFreesItsPlace: a tenant (mallory) at its bound of credentials
// that revokes one is still refused one more, the revoked record kept for
// CredentialRetention; once the retention passed and the credential is pruned, its
// place is free and the count stays right. Before, a pruned credential left its count,
// and its tenant refused for ever.
func TestAPrunedCredentialFreesItsPlace(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		clk := clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
		s := mustOpen(t, open, Options{Now: clk.Now, Bounds: TenantBounds{Credentials: 2}})
		makeCountedTenants(t, s, "mallory")
		create := func() error { return s.Update(func(tx *Tx) error { return countedCases[3].create(tx, "mallory", 0) }) }
		var first Credential
		mustUpdate(t, s, func(tx *Tx) (err error) {
			first, _, err = tx.CreateCredential("mallory", []string{"compute:nodes:read"}, time.Time{})
			return err
		})
		if err := create(); err != nil {
			t.Fatalf("mallory's second credential: %v", err)
		}
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.RevokeCredential(first.ID); return err })
		if err := create(); proto.CodeOf(err) != proto.InvalidState {
			t.Fatalf("a credential after mallory revoked one: %v, want INVALID_STATE (the revoked one is kept)", err)
		}
		clk.Advance(CredentialRetention + time.Hour)
		if n, err := s.PruneOnward((*Tx).PruneCredentials); err != nil || n != 1 {
			t.Fatalf("pruned %d credentials (%v), want the revoked one", n, err)
		}
		mustCheck(t, s, "the prune")
		if err := create(); err != nil {
			t.Fatalf("mallory's credential after the revoked one was pruned: %v", err)
		}
		if n := tenantCount(t, s, countCredentials, "mallory"); n != 2 {
			t.Errorf("mallory's count of credentials: %d, want 2", n)
		}
	})
}
