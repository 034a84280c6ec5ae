package join

import (
	"context"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/google/go-cmp/cmp"
)

type fixture struct {
	svc   *Service
	store *store.Store
	keys  *pki.PKI
	clock *clock.Fake // the store's, moved by tests
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC))
	st := storetest.Filled(t, store.Options{Now: clk.Now}) // site rack-a: tokens name a site that exists
	keys, err := pki.LoadOrCreate(t.TempDir(), clock.Real{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	return &fixture{svc: NewService(st, keys, []string{"127.0.0.1:7444"}, log), store: st, keys: keys, clock: clk}
}

func (f *fixture) mint(t testing.TB, kind, nodeID, site string, ttl time.Duration) (store.JoinToken, string) {
	t.Helper()
	var tok store.JoinToken
	var secret string
	if err := f.store.Update(func(tx *store.Tx) (err error) {
		tok, secret, err = MintToken(tx, store.TokenFor{Kind: kind, NodeID: nodeID, Site: site}, ttl)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return tok, secret
}

// revokedNode enrolls a node, mints it a provisioned token, then revokes its identity
// (as metal.revokeIdentity marks it, leaving the token), and returns the node's id and
// the token.
func (f *fixture) revokedNode(t testing.TB) (node, secret string) {
	t.Helper()
	node = storetest.Node(t, f.store, store.Node{MACs: []string{"52:54:00:00:00:01"}}).ID
	_, secret = f.mint(t, store.TokenProvisioned, node, "rack-a", 0)
	storetest.Update(t, f.store, func(tx *store.Tx) error {
		_, err := tx.UpdateNode(node, func(n *store.Node) error { n.IdentityRevokedAt = tx.Now(); return nil })
		return err
	})
	return node, secret
}

// tokens lists every join token of the store.
func (f *fixture) tokens(t testing.TB) []store.JoinToken {
	t.Helper()
	var all []store.JoinToken
	if err := f.store.View(func(tx *store.Tx) (err error) { all, _, err = tx.JoinTokens(store.Page{}); return err }); err != nil {
		t.Fatal(err)
	}
	return all
}

func (f *fixture) token(t testing.TB, id string) store.JoinToken {
	t.Helper()
	for _, tok := range f.tokens(t) {
		if tok.ID == id {
			return tok
		}
	}
	t.Fatalf("token %s not listed", id)
	return store.JoinToken{}
}

// request builds what bcd sends: a fresh key, and the token sealed to `to` for the claim.
func request(t testing.TB, to *ecdh.PublicKey, nodeID, role, token string) (joinwire.Request, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	spki, _ := x509.MarshalPKIXPublicKey(key.Public())
	sealed, err := joinwire.SealToken(to, joinwire.AAD(nodeID, role, spki), token)
	if err != nil {
		t.Fatal(err)
	}
	return joinwire.Request{NodeID: nodeID, Role: role, PublicKey: base64.StdEncoding.EncodeToString(spki), SealedToken: base64.StdEncoding.EncodeToString(sealed)}, key
}

func TestJoinAdmits(t *testing.T) {
	f := newFixture(t)
	tok, secret := f.mint(t, store.TokenSite, "", "rack-a", 0)
	req, key := request(t, f.keys.JoinEncryptionKey(), "rack-a", joinwire.RoleSite, secret)
	resp, err := f.svc.Join(context.Background(), "", req)
	if err != nil {
		t.Fatal(err)
	}
	p, err := joinwire.VerifyResponse(f.keys.JoinSigningKey(), resp)
	if err != nil {
		t.Fatal(err)
	}
	want := joinwire.Payload{Version: 1, NodeID: "rack-a", Role: "site", Site: "rack-a", AgentCA: string(f.keys.AgentCAPEM), AgentEndpoint: "127.0.0.1:7444"}
	if diff := cmp.Diff(want, p, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Certificate" }, cmp.Ignore())); diff != "" {
		t.Errorf("payload (-want +got):\n%s", diff)
	}
	cert, err := joinwire.ParseCertificatePEM(p.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) || cert.Subject.CommonName != "rack-a" {
		t.Errorf("certificate for %v, CN %q", cert.PublicKey, cert.Subject.CommonName)
	}
	if used := f.token(t, tok.ID).UsedAt; !used.Equal(f.clock.Now()) {
		t.Errorf("token used at %v, want %v", used, f.clock.Now())
	}
}

// TestJoinRecordsItsEpoch: a join records on its token the identity epoch of the
// certificate it issued (the node's), which metal's TokenReused compares with the
// node's when the token is presented again; a refused join records nothing.
func TestJoinRecordsItsEpoch(t *testing.T) {
	f := newFixture(t)
	node := storetest.Node(t, f.store, store.Node{MACs: []string{"52:54:00:00:00:07"}, IdentityEpoch: 3}).ID
	tok, secret := f.mint(t, store.TokenProvisioned, node, "rack-a", 0)
	wrong, _ := request(t, f.keys.JoinEncryptionKey(), node, joinwire.RoleRamdisk, secret)
	if _, err := f.svc.Join(context.Background(), "192.0.2.7", wrong); proto.CodeOf(err) != proto.Forbidden {
		t.Fatalf("a provisioned token joining as the ramdisk: %v, want FORBIDDEN", err)
	}
	if got := f.token(t, tok.ID).UsedEpoch; got != nil {
		t.Errorf("a refused join recorded epoch %d", *got)
	}
	req, _ := request(t, f.keys.JoinEncryptionKey(), node, joinwire.RoleNode, secret)
	if _, err := f.svc.Join(context.Background(), "192.0.2.7", req); err != nil {
		t.Fatal(err)
	}
	if got := f.token(t, tok.ID).UsedEpoch; got == nil || *got != 3 {
		t.Errorf("the join recorded epoch %v, want the node's, 3", got)
	}
}

func TestJoinRefuses(t *testing.T) {
	other, _ := ecdh.X25519().GenerateKey(rand.Reader)
	// provisioned mints the token most cases send: a provisioned one for node n1.
	provisioned := func(t *testing.T, f *fixture) (string, string) {
		_, secret := f.mint(t, store.TokenProvisioned, "n1", "", 0)
		return "n1", secret
	}
	cases := map[string]struct {
		// token makes what the request carries and returns the node it is for and its
		// secret; provisioned where nil.
		token func(t *testing.T, f *fixture) (node, secret string)
		// claim is the node id the request claims (token's where empty), role its role
		// ("node" where empty); sealTo the key the token is sealed to (the registry's
		// where nil).
		claim, role string
		sealTo      *ecdh.PublicKey
		// before runs before the request is made, edit changes it once sealed.
		before func(t *testing.T, f *fixture, node, secret string)
		edit   func(t *testing.T, f *fixture, req *joinwire.Request, secret string)
		code   proto.Code
		reason string
		path   string
		// keeps says the token must still be unused afterwards.
		keeps bool
	}{
		"second use": {
			before: func(t *testing.T, f *fixture, node, secret string) {
				first, _ := request(t, f.keys.JoinEncryptionKey(), node, "node", secret)
				if _, err := f.svc.Join(context.Background(), "", first); err != nil {
					t.Fatal(err)
				}
			},
			code: proto.Unauthenticated, reason: "token-used",
		},
		"expired": {
			before: func(t *testing.T, f *fixture, node, secret string) { f.clock.Advance(2 * time.Hour) },
			code:   proto.Unauthenticated, reason: "token-expired", keeps: true,
		},
		"another node id": {claim: "n2", code: proto.Forbidden, reason: "identity", keeps: true},
		"site token as a node": {
			token: func(t *testing.T, f *fixture) (string, string) {
				_, secret := f.mint(t, store.TokenSite, "", "rack-a", 0)
				return "rack-a", secret
			},
			code: proto.Forbidden, reason: "role", keeps: true,
		},
		"sealed to another key": {sealTo: other.PublicKey(), code: proto.Unauthenticated, reason: "sealed-token", keeps: true},
		"sealed for another node": {
			edit: func(t *testing.T, f *fixture, req *joinwire.Request, secret string) { req.NodeID = "n2" },
			code: proto.Unauthenticated, reason: "sealed-token", keeps: true,
		},
		"key swapped": {
			edit: func(t *testing.T, f *fixture, req *joinwire.Request, secret string) {
				swap, _ := request(t, f.keys.JoinEncryptionKey(), req.NodeID, req.Role, secret)
				req.PublicKey = swap.PublicKey
			},
			code: proto.Unauthenticated, reason: "sealed-token", keeps: true,
		},
		"not a token": {
			token: func(*testing.T, *fixture) (string, string) { return "n1", "hello" },
			code:  proto.Unauthenticated, reason: "token-invalid",
		},
		"revoked node": {
			token: func(t *testing.T, f *fixture) (string, string) { return f.revokedNode(t) },
			code:  proto.Forbidden, reason: "identity-revoked", keeps: true,
		},
		"site that does not exist": {
			// A token minted before MintToken checked the site, written straight to the store.
			token: func(t *testing.T, f *fixture) (string, string) {
				var secret string
				storetest.Update(t, f.store, func(tx *store.Tx) (err error) {
					_, secret, err = tx.CreateJoinToken(store.TokenFor{Kind: store.TokenSite, NodeID: "rack-z", Site: "rack-z"}, tx.Now().Add(time.Hour))
					return err
				})
				return "rack-z", secret
			},
			role: "site", code: proto.NotFound, path: "site", keeps: true,
		},
		"site token for another node id": {
			// A token minted before a site token's node id had to be its site's: the
			// agent it would admit is no site's, and no revocation of the site reaches it.
			token: func(t *testing.T, f *fixture) (string, string) {
				var secret string
				storetest.Update(t, f.store, func(tx *store.Tx) (err error) {
					_, secret, err = tx.CreateJoinToken(store.TokenFor{Kind: store.TokenSite, NodeID: "rack-a-2", Site: "rack-a"}, tx.Now().Add(time.Hour))
					return err
				})
				return "rack-a-2", secret
			},
			role: "site", code: proto.Forbidden, reason: "identity", keeps: true,
		},
		"bad role": {
			token: func(*testing.T, *fixture) (string, string) { return "n1", "x" },
			role:  "root", code: proto.InvalidInput, path: "role",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			token, claim, role, sealTo := tc.token, tc.claim, tc.role, tc.sealTo
			if token == nil {
				token = provisioned
			}
			node, secret := token(t, f)
			if claim == "" {
				claim = node
			}
			if role == "" {
				role = "node"
			}
			if sealTo == nil {
				sealTo = f.keys.JoinEncryptionKey()
			}
			if tc.before != nil {
				tc.before(t, f, node, secret)
			}
			req, _ := request(t, sealTo, claim, role, secret)
			if tc.edit != nil {
				tc.edit(t, f, &req, secret)
			}
			_, err := f.svc.Join(context.Background(), "", req)
			e := proto.AsError(err)
			if e.Code != tc.code || e.Details.Reason != tc.reason || e.Details.Path != tc.path {
				t.Fatalf("got %v (reason %q, path %q), want %s %q %q", err, e.Details.Reason, e.Details.Path, tc.code, tc.reason, tc.path)
			}
			if tc.keeps {
				for _, tok := range f.tokens(t) {
					if !tok.UsedAt.IsZero() {
						t.Errorf("a refused join consumed token %s", tok.ID)
					}
				}
			}
		})
	}
}

func TestJoinRaceAdmitsExactlyOne(t *testing.T) {
	f := newFixture(t)
	_, secret := f.mint(t, store.TokenRamdisk, "n1", "", 0)
	const racers = 8
	reqs := make([]joinwire.Request, racers)
	for i := range reqs {
		reqs[i], _ = request(t, f.keys.JoinEncryptionKey(), "n1", "ramdisk", secret)
	}
	var wg sync.WaitGroup
	errs := make([]error, racers)
	start := make(chan struct{})
	for i := range reqs {
		wg.Go(func() {
			<-start
			_, errs[i] = f.svc.Join(context.Background(), "", reqs[i])
		})
	}
	close(start)
	wg.Wait()
	admitted := 0
	for _, err := range errs {
		if err == nil {
			admitted++
		} else if e := proto.AsError(err); e.Details.Reason != "token-used" {
			t.Errorf("a loser got %v, want token-used", err)
		}
	}
	if admitted != 1 {
		t.Fatalf("%d joins admitted with one token, want exactly 1", admitted)
	}
}

func TestMintToken(t *testing.T) {
	f := newFixture(t)
	now := f.clock.Now()
	type minted struct {
		Kind, NodeID, Site string
		ExpiresAt          time.Time
	}
	cases := map[string]struct {
		kind, node, site string
		ttl              time.Duration
		want             minted
		code             proto.Code // INVALID_INPUT unless given
		path             string
	}{
		"provisioned default 2h": {kind: "provisioned", node: "n1", want: minted{"provisioned", "n1", "", now.Add(2 * time.Hour)}},
		"ramdisk default 1h":     {kind: "ramdisk", node: "n1", site: "rack-a", want: minted{"ramdisk", "n1", "rack-a", now.Add(time.Hour)}},
		"site default 24h":       {kind: "site", site: "rack-a", want: minted{"site", "rack-a", "rack-a", now.Add(24 * time.Hour)}},
		"site with its own name": {kind: "site", node: "rack-a", site: "rack-a", ttl: time.Minute, want: minted{"site", "rack-a", "rack-a", now.Add(time.Minute)}},
		"site with another name": {kind: "site", node: "rack-a-2", site: "rack-a", path: "nodeId"},
		"unknown kind":           {kind: "root", node: "n1", path: "kind"},
		"site without site":      {kind: "site", node: "n1", path: "site"},
		"bad site":               {kind: "site", site: "Rack A", path: "site"},
		"node without node id":   {kind: "provisioned", path: "nodeId"},
		"bad node id":            {kind: "provisioned", node: "n 1", path: "nodeId"},
		"ttl too long":           {kind: "provisioned", node: "n1", ttl: 31 * 24 * time.Hour, path: "ttlSeconds"},
		"ttl negative":           {kind: "provisioned", node: "n1", ttl: -time.Hour, path: "ttlSeconds"},
		"unknown site":           {kind: "site", site: "rack-z", code: proto.NotFound, path: "site"},
		"ramdisk unknown site":   {kind: "ramdisk", node: "n1", site: "rack-z", code: proto.NotFound, path: "site"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var tok store.JoinToken
			err := f.store.Update(func(tx *store.Tx) (err error) {
				tok, _, err = MintToken(tx, store.TokenFor{Kind: tc.kind, NodeID: tc.node, Site: tc.site}, tc.ttl)
				return err
			})
			if tc.path != "" {
				code := tc.code
				if code == "" {
					code = proto.InvalidInput
				}
				if e := proto.AsError(err); e.Code != code || e.Details.Path != tc.path {
					t.Fatalf("got %v, want %s at %s", err, code, tc.path)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, minted{tok.Kind, tok.NodeID, tok.Site, tok.ExpiresAt}); diff != "" {
				t.Errorf("token (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMintTokenRefusesRevokedNode(t *testing.T) {
	f := newFixture(t)
	node, _ := f.revokedNode(t)
	err := f.store.Update(func(tx *store.Tx) error {
		_, _, err := MintToken(tx, store.TokenFor{Kind: store.TokenRamdisk, NodeID: node, Site: "rack-a"}, 0)
		return err
	})
	if e := proto.AsError(err); e.Code != proto.Forbidden || e.Details.Reason != "identity-revoked" {
		t.Fatalf("got %v, want FORBIDDEN identity-revoked", err)
	}
}

func TestPruneTokens(t *testing.T) {
	f := newFixture(t)
	old, _ := f.mint(t, store.TokenProvisioned, "n1", "", time.Hour) // expires, then ages past retention
	_, usedSecret := f.mint(t, store.TokenRamdisk, "n2", "", time.Hour)
	used, _ := request(t, f.keys.JoinEncryptionKey(), "n2", "ramdisk", usedSecret)
	if _, err := f.svc.Join(context.Background(), "", used); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(Retention + 2*time.Hour)
	recent, _ := f.mint(t, store.TokenProvisioned, "n3", "", time.Hour) // not expired yet
	f.clock.Advance(2 * time.Hour)                                      // expired, within retention
	pruned, err := f.store.PruneOnward(PruneTokens)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, tok := range f.tokens(t) {
		left = append(left, tok.ID)
	}
	if pruned != 2 || !slices.Equal(left, []string{recent.ID}) {
		t.Errorf("pruned %d, left %v; want the expired old and used tokens gone and %s (%s gone) kept", pruned, left, recent.ID, old.ID)
	}
}

func TestRenew(t *testing.T) {
	f := newFixture(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	spki, _ := x509.MarshalPKIXPublicKey(key.Public())
	der, err := Renew(f.store, f.keys, proto.AgentCredential{Node: "rack-a", Role: proto.RoleSite}, spki)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "rack-a" || !slices.Equal(cert.Subject.OrganizationalUnit, []string{"site"}) || !key.PublicKey.Equal(cert.PublicKey) || cert.CheckSignatureFrom(f.keys.AgentCA) != nil {
		t.Errorf("renewed certificate: %v, key %v", cert.Subject, cert.PublicKey)
	}

	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	spki384, _ := x509.MarshalPKIXPublicKey(p384.Public())
	if _, err := Renew(f.store, f.keys, proto.AgentCredential{Node: "rack-a", Role: proto.RoleSite, Epoch: 0}, spki384); proto.CodeOf(err) != proto.InvalidInput {
		t.Errorf("a P-384 key: got %v, want INVALID_INPUT", err)
	}
	node, _ := f.revokedNode(t)
	if _, err := Renew(f.store, f.keys, proto.AgentCredential{Node: node, Role: proto.RoleNode, Epoch: 0}, spki); proto.AsError(err).Details.Reason != "identity-revoked" {
		t.Errorf("a revoked node: got %v, want FORBIDDEN identity-revoked", err)
	}

	// A node whose machine was released and deployed again since: a certificate of its
	// earlier installation is renewed no more, one of its current installation keeps
	// its epoch.
	reinstalled := storetest.Node(t, f.store, store.Node{MACs: []string{"52:54:00:00:00:02"}}).ID
	storetest.Update(t, f.store, func(tx *store.Tx) error {
		_, err := tx.UpdateNode(reinstalled, func(n *store.Node) error { n.IdentityEpoch = 2; return nil })
		return err
	})
	for _, epoch := range []int64{0, 1} {
		if _, err := Renew(f.store, f.keys, proto.AgentCredential{Node: reinstalled, Role: proto.RoleNode, Epoch: epoch}, spki); proto.CodeOf(err) != proto.Forbidden ||
			proto.AsError(err).Details.Reason != proto.ReasonEarlierInstallation {
			t.Errorf("a certificate of epoch %d, the node at 2: got %v, want FORBIDDEN %s", epoch, err, proto.ReasonEarlierInstallation)
		}
	}
	der, err = Renew(f.store, f.keys, proto.AgentCredential{Node: reinstalled, Role: proto.RoleNode, Epoch: 2}, spki)
	if err == nil {
		cert, err = x509.ParseCertificate(der)
	}
	var epoch int64
	if err == nil {
		epoch, err = proto.IdentityEpoch(cert)
	}
	if err != nil || epoch != 2 {
		t.Errorf("a certificate of the current installation renewed: epoch %d, %v; want 2", epoch, err)
	}
}

// TestSiteAgentRevocation: once an operator revokes a site agent's certificates
// (store.Tx.RevokeSiteAgent), a certificate issued before names an earlier epoch of the
// site and is renewed no more (FORBIDDEN, reason revoked), the site's unused token is
// gone, and a site token minted after joins the agent again with a certificate of the
// site's new epoch, which renews at that epoch. Before site certificates named an epoch,
// nothing the registry held could refuse one.
func TestSiteAgentRevocation(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	epochOf := func(what string, der []byte) int64 {
		t.Helper()
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		epoch, err := proto.IdentityEpoch(cert)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return epoch
	}
	joined := func(what string) (int64, []byte) {
		t.Helper()
		_, secret := f.mint(t, store.TokenSite, "", "rack-a", 0)
		req, _ := request(t, f.keys.JoinEncryptionKey(), "rack-a", joinwire.RoleSite, secret)
		resp, err := f.svc.Join(ctx, "", req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		p, err := joinwire.VerifyResponse(f.keys.JoinSigningKey(), resp)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := joinwire.ParseCertificatePEM(p.Certificate)
		if err != nil {
			t.Fatal(err)
		}
		spki, _ := x509.MarshalPKIXPublicKey(cert.PublicKey)
		return epochOf(what, cert.Raw), spki
	}
	first, spki := joined("the first join")
	if first != 0 {
		t.Fatalf("the first site certificate names epoch %d, want 0", first)
	}
	unused, _ := f.mint(t, store.TokenSite, "", "rack-a", 0)
	storetest.Update(t, f.store, func(tx *store.Tx) error {
		_, deleted, err := tx.RevokeSiteAgent("rack-a", store.Revocation{Reason: "rack server stolen"})
		if err == nil && deleted != 1 {
			t.Errorf("the revocation deleted %d unused tokens, want 1", deleted)
		}
		return err
	})
	for _, tok := range f.tokens(t) {
		if tok.ID == unused.ID {
			t.Errorf("the site's unused token %s outlived the revocation", tok.ID)
		}
	}
	_, err := Renew(f.store, f.keys, proto.AgentCredential{Node: "rack-a", Role: proto.RoleSite, Epoch: first}, spki)
	if e := proto.AsError(err); e.Code != proto.Forbidden || e.Details.Reason != proto.ReasonRevoked || !strings.Contains(e.Message, "rack server stolen") {
		t.Errorf("renewing the revoked certificate: %v, want FORBIDDEN %s with the reason", err, proto.ReasonRevoked)
	}
	again, spki := joined("the join after the revocation")
	if again != 1 {
		t.Fatalf("the new site certificate names epoch %d, want 1", again)
	}
	der, err := Renew(f.store, f.keys, proto.AgentCredential{Node: "rack-a", Role: proto.RoleSite, Epoch: again}, spki)
	if err != nil || epochOf("the renewal", der) != 1 {
		t.Errorf("renewing the new certificate: %v, want one of epoch 1", err)
	}
}

// reuses records what Join tells of tokens presented again: the Reuses and the Observer.
type reuses struct {
	told    []store.JoinToken
	from    []string
	counted []string
}

func (r *reuses) TokenReused(_ context.Context, tok store.JoinToken, from string) error {
	r.told, r.from = append(r.told, tok), append(r.from, from)
	return nil
}

func (r *reuses) JoinTokenReused(kind, address string) {
	r.counted = append(r.counted, kind+" "+address)
}

// TestJoinTellsOnAUsedTokenPresentedAgain: the join records the address it came from on
// the token; the token presented again, by whoever holds it, is refused token-used and
// told with the address of its join and the address it came from again, and counted by
// kind and how the two compare. A token that never joined, or a wrong secret, tells
// nothing: only the holder of a used token's secret trips it. Nor does the join's own
// request sent again, beside the key the join certified, which whoever saw it can send:
// it is answered again, with a certificate for that key, while its token lives, and
// refused token-used after.
func TestJoinTellsOnAUsedTokenPresentedAgain(t *testing.T) {
	f := newFixture(t)
	r := &reuses{}
	f.svc.OnReuse(r, r)
	tok, secret := f.mint(t, store.TokenRamdisk, "n1", "rack-a", 0)
	first, _ := request(t, f.keys.JoinEncryptionKey(), "n1", joinwire.RoleRamdisk, secret)
	if _, err := f.svc.Join(context.Background(), "192.0.2.2", first); err != nil {
		t.Fatal(err)
	}
	if got := f.token(t, tok.ID).UsedFrom; got != "192.0.2.2" {
		t.Fatalf("the token's join recorded from %q, want 192.0.2.2", got)
	}
	if _, err := f.svc.Join(context.Background(), "192.0.2.1", first); err != nil {
		t.Fatalf("the join's request sent again: %v, want it answered again", err)
	}
	for _, from := range []string{"192.0.2.1", "192.0.2.2", ""} {
		again, _ := request(t, f.keys.JoinEncryptionKey(), "n1", joinwire.RoleRamdisk, secret)
		if _, err := f.svc.Join(context.Background(), from, again); proto.AsError(err).Details.Reason != proto.ReasonTokenUsed {
			t.Fatalf("presented again from %q: %v, want token-used", from, err)
		}
	}
	wrong, _ := request(t, f.keys.JoinEncryptionKey(), "n1", joinwire.RoleRamdisk, secret[:len(secret)-2]+"AA")
	if _, err := f.svc.Join(context.Background(), "192.0.2.1", wrong); proto.AsError(err).Details.Reason != proto.ReasonTokenInvalid {
		t.Fatalf("a wrong secret: %v, want token-invalid", err)
	}
	f.clock.Advance(time.Hour)
	if _, err := f.svc.Join(context.Background(), "192.0.2.1", first); proto.AsError(err).Details.Reason != proto.ReasonTokenUsed {
		t.Fatalf("the join's request sent again once its token expired: %v, want token-used", err)
	}
	if diff := cmp.Diff([]string{"192.0.2.1", "192.0.2.2", ""}, r.from); diff != "" {
		t.Errorf("told from (-want +got):\n%s", diff)
	}
	for _, told := range r.told {
		if told.ID != tok.ID || told.UsedFrom != "192.0.2.2" || told.NodeID != "n1" {
			t.Errorf("told %+v, want token %s of n1 used from 192.0.2.2", told, tok.ID)
		}
	}
	if diff := cmp.Diff([]string{"ramdisk other", "ramdisk same", "ramdisk unknown"}, r.counted); diff != "" {
		t.Errorf("counted (-want +got):\n%s", diff)
	}
}
