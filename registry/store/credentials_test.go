package store

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
)

func TestCredentialLifecycle(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
		s, err := open(t, Options{Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		type made struct {
			Credential
			bearer string
		}
		create := func(tenant string, expires time.Time, actions ...string) (m made, err error) {
			err = s.Update(func(tx *Tx) (err error) {
				m.Credential, m.bearer, err = tx.CreateCredential(tenant, actions, expires)
				return err
			})
			return m, err
		}
		must := func(m made, err error) made {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		authenticate := func(bearer string) (c Credential, err error) {
			s.View(func(tx *Tx) error { c, err = tx.Authenticate(bearer); return err })
			return c, err
		}
		s.Update(func(tx *Tx) error {
			for _, tn := range []string{"acme", "beta", RootTenant} {
				if _, err := tx.CreateTenant(tn); err != nil {
					return err
				}
			}
			return nil
		})

		expiring := must(create("acme", now.Add(time.Hour), "compute:profiles:read"))
		lasting := must(create("acme", time.Time{}, "compute:profiles:read"))
		other := must(create("beta", time.Time{}, "compute:profiles:read"))
		admin := must(create(RootTenant, time.Time{}, "*"))

		t.Run("an expiry not in the future is refused and nothing is made", func(t *testing.T) {
			for _, at := range []time.Time{now, now.Add(-time.Second)} {
				_, err := create("acme", at, "compute:profiles:read")
				if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != "expiresAt" {
					t.Errorf("expiry %s: %v, want INVALID_INPUT at expiresAt", at, err)
				}
			}
			s.View(func(tx *Tx) error {
				if got, _, _ := tx.Credentials("acme", Page{}); len(got) != 2 {
					t.Errorf("acme has %d credentials, want 2", len(got))
				}
				return nil
			})
		})

		t.Run("an expired credential authenticates nobody", func(t *testing.T) {
			if c, err := authenticate(expiring.bearer); err != nil || c.ExpiresAt != now.Add(time.Hour) {
				t.Fatalf("before its expiry: %+v, %v", c, err)
			}
			now = now.Add(time.Hour)
			_, err := authenticate(expiring.bearer)
			if proto.CodeOf(err) != proto.Unauthenticated || !strings.Contains(err.Error(), "expired at 2026-09-01T13:00:00Z") {
				t.Errorf("at its expiry: %v, want UNAUTHENTICATED saying it expired", err)
			}
			if _, err := authenticate(lasting.bearer); err != nil {
				t.Errorf("a credential without expiry: %v", err)
			}
		})

		t.Run("a revoked credential authenticates nobody, and revoking again changes nothing", func(t *testing.T) {
			var revoked Credential
			if err := s.Update(func(tx *Tx) (err error) { revoked, err = tx.RevokeCredential(lasting.ID); return err }); err != nil {
				t.Fatal(err)
			}
			if revoked.RevokedAt != now {
				t.Errorf("revoked at %s, want %s", revoked.RevokedAt, now)
			}
			_, err := authenticate(lasting.bearer)
			if proto.CodeOf(err) != proto.Unauthenticated || !strings.Contains(err.Error(), "revoked") {
				t.Errorf("after revoking: %v, want UNAUTHENTICATED saying it was revoked", err)
			}
			// A wrong secret for a revoked credential learns nothing of it.
			_, err = authenticate(forged(lasting.bearer))
			if proto.CodeOf(err) != proto.Unauthenticated || strings.Contains(err.Error(), lasting.ID) {
				t.Errorf("a forged secret of a revoked credential: %v", err)
			}
			now = now.Add(time.Minute)
			s.Update(func(tx *Tx) (err error) { revoked, err = tx.RevokeCredential(lasting.ID); return err })
			if revoked.RevokedAt != now.Add(-time.Minute) {
				t.Errorf("revoking again moved the time to %s", revoked.RevokedAt)
			}
			err = s.Update(func(tx *Tx) error { _, err := tx.RevokeCredential("0000000000000000"); return err })
			if proto.CodeOf(err) != proto.NotFound {
				t.Errorf("revoking an unknown id: %v", err)
			}
		})

		t.Run("a tenant's list holds its own credentials only, across pages", func(t *testing.T) {
			want := []string{expiring.ID, lasting.ID}
			for i := range 30 {
				tenant := "beta"
				if i%3 == 0 {
					tenant = "acme"
				}
				if m := must(create(tenant, time.Time{}, "compute:profiles:read")); tenant == "acme" {
					want = append(want, m.ID)
				}
			}
			slices.Sort(want)
			var got []string
			page := Page{Limit: 4}
			for pages := 0; ; pages++ {
				if pages > len(want) {
					t.Fatal("the pages never end")
				}
				var creds []Credential
				var next string
				if err := s.View(func(tx *Tx) (err error) { creds, next, err = tx.Credentials("acme", page); return err }); err != nil {
					t.Fatal(err)
				}
				for _, c := range creds {
					if c.Tenant != "acme" {
						t.Errorf("acme's list holds %s of %s", c.ID, c.Tenant)
					}
					got = append(got, c.ID)
				}
				if next == "" {
					break
				}
				page.Cursor = next
			}
			if !slices.Equal(got, want) {
				t.Errorf("acme's credentials %v, want %v", got, want)
			}
			if slices.Contains(got, other.ID) {
				t.Errorf("beta's credential in acme's list")
			}
		})

		t.Run("usable holders of an action", func(t *testing.T) {
			count := func(tenant, action string) int {
				var holders []Credential
				s.View(func(tx *Tx) (err error) { holders, err = tx.UsableHolding(tenant, action); return err })
				return len(holders)
			}
			if n := count(RootTenant, "*"); n != 1 {
				t.Errorf("root holders of *: %d, want 1", n)
			}
			// acme: one expired, one revoked, ten made above.
			if n := count("acme", "compute:profiles:read"); n != 10 {
				t.Errorf("acme's usable readers: %d, want 10", n)
			}
			s.Update(func(tx *Tx) error { _, err := tx.RevokeCredential(admin.ID); return err })
			if n := count(RootTenant, "*"); n != 0 {
				t.Errorf("root holders of * after revoking: %d", n)
			}
		})
	})
}

// A bearer credential or a join token is one spelling of its secret: the same secret bytes
// spelled with the last character's unused bits set (a spelling the registry never writes)
// are refused, and the token stays unused for its real holder.
func TestSecretsHaveOneSpelling(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
		s, err := open(t, Options{Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		var bearer, secret string
		if err := s.Update(func(tx *Tx) (err error) {
			if _, err = tx.CreateTenant("acme"); err != nil {
				return err
			}
			if _, bearer, err = tx.CreateCredential("acme", []string{"compute:profiles:read"}, time.Time{}); err != nil {
				return err
			}
			_, secret, err = tx.CreateJoinToken(TokenFor{Kind: TokenProvisioned, NodeID: "node-1"}, now.Add(time.Hour))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		s.View(func(tx *Tx) error {
			if _, err := tx.Authenticate(respelled(t, bearer)); proto.CodeOf(err) != proto.Unauthenticated {
				t.Errorf("a credential respelled: %v, want UNAUTHENTICATED", err)
			}
			return nil
		})
		err = s.Update(func(tx *Tx) error { _, err := tx.ConsumeJoinToken(respelled(t, secret), "192.0.2.7"); return err })
		if err == nil || proto.AsError(err).Details.Reason != proto.ReasonTokenInvalid {
			t.Errorf("a join token respelled: %v, want token-invalid", err)
		}
		if err := s.Update(func(tx *Tx) error { _, err := tx.ConsumeJoinToken(secret, "192.0.2.8"); return err }); err != nil {
			t.Errorf("the join token's holder after a respelled try: %v", err)
		}
	})
}

// forged is a bearer secret with one character of its secret changed to another: a
// secret nobody was given. (Changing the last character alone can spell the same bytes.)
func forged(bearer string) string {
	i := len(bearer) - 10 // inside the secret part, past the id and the dot
	c := byte('A')
	if bearer[i] == 'A' {
		c = 'B'
	}
	return bearer[:i] + string(c) + bearer[i+1:]
}

// respelled is a secret of 32 bytes with its last character's two bits that the
// unpadded spelling leaves out set: the same bytes, spelled as the registry never does.
func respelled(t *testing.T, bearer string) string {
	t.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, bearer[len(bearer)-1])
	if last < 0 || last&3 != 0 {
		t.Fatalf("%q does not end in a canonical spelling of 32 bytes", bearer)
	}
	return bearer[:len(bearer)-1] + string(alphabet[last|3])
}

// TestCredentialsArePrunedAfterTheirRetention: the daily prune deletes a credential
// revoked, or expired, more than CredentialRetention ago, and its secret is still
// refused, UNAUTHENTICATED as one never made; a usable credential, one expiring later,
// and one revoked or expired within the retention stay, and the usable ones still
// authenticate. Before, every credential was kept for ever.
func TestCredentialsArePrunedAfterTheirRetention(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s, clk := openOnFakeClock(t, open)
		mustUpdate(t, s, func(tx *Tx) error { _, err := tx.CreateTenant("acme"); return err })
		bearers := map[string]string{}
		credential := func(name string, expires time.Time, revoke bool) {
			t.Helper()
			mustUpdate(t, s, func(tx *Tx) error {
				c, bearer, err := tx.CreateCredential("acme", []string{"compute:profiles:read"}, expires)
				if err != nil {
					return err
				}
				bearers[name] = bearer
				if revoke {
					_, err = tx.RevokeCredential(c.ID)
				}
				return err
			})
		}
		start := clk.Now()
		credential("lasting", time.Time{}, false)
		credential("expiring later", start.Add(CredentialRetention+48*time.Hour), false)
		credential("revoked long ago", time.Time{}, true)
		credential("expired long ago", start.Add(time.Hour), false)
		clk.Advance(CredentialRetention / 2)
		credential("revoked lately", time.Time{}, true)
		credential("expired lately", clk.Now().Add(time.Hour), false)
		clk.Advance(CredentialRetention/2 + 2*time.Hour)

		n, err := s.PruneOnward((*Tx).PruneCredentials)
		if err != nil || n != 2 {
			t.Fatalf("pruned %d credentials (%v), want the two revoked or expired a retention ago", n, err)
		}
		for name, bearer := range bearers {
			var err error
			s.View(func(tx *Tx) error { _, err = tx.Authenticate(bearer); return nil })
			switch name {
			case "lasting", "expiring later":
				if err != nil {
					t.Errorf("%s: %v, want it to authenticate", name, err)
				}
			case "revoked long ago", "expired long ago":
				if e := proto.AsError(err); e.Code != proto.Unauthenticated || !strings.Contains(e.Message, "the credential is not valid") {
					t.Errorf("%s, pruned: %v, want UNAUTHENTICATED as an unknown one", name, err)
				}
			default:
				if e := proto.AsError(err); e.Code != proto.Unauthenticated || !strings.Contains(e.Message, " at ") {
					t.Errorf("%s, kept: %v, want UNAUTHENTICATED saying when", name, err)
				}
			}
		}
		var left []Credential
		s.View(func(tx *Tx) (err error) { left, _, err = tx.Credentials("acme", Page{}); return err })
		if len(left) != 4 {
			t.Errorf("%d credentials listed, want the 4 kept", len(left))
		}
	})
}
