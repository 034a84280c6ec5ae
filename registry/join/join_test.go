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
	st := storetest.Open(t, store.Options{Now: clk.Now})
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
	if err := f.store.Update(func(tx *store.Tx) (err error) { tok, secret, err = MintToken(tx, kind, nodeID, site, ttl); return err }); err != nil {
		t.Fatal(err)
	}
	return tok, secret
}

// revokedNode enrolls a node, mints it a provisioned token, then revokes its identity
// (as metal.revokeIdentity marks it, leaving the token), and returns the node's id and
// the token.
func (f *fixture) revokedNode(t testing.TB) (node, secret string) {
	t.Helper()
	err := f.store.Update(func(tx *store.Tx) error {
		if _, err := tx.CreateSite("rack-a"); err != nil {
			return err
		}
		if _, err := tx.CreateTenant("acme"); err != nil {
			return err
		}
		if _, err := tx.CreatePool(store.Pool{Tenant: "acme", Name: "gpu", Site: "rack-a"}); err != nil {
			return err
		}
		n, err := tx.CreateNode(store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}})
		node = n.ID
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	_, secret = f.mint(t, store.TokenProvisioned, node, "rack-a", 0)
	err = f.store.Update(func(tx *store.Tx) error {
		_, err := tx.UpdateNode(node, func(n *store.Node) error { n.IdentityRevokedAt = tx.Now(); return nil })
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return node, secret
}

func (f *fixture) token(t testing.TB, id string) store.JoinToken {
	t.Helper()
	var all []store.JoinToken
	f.store.View(func(tx *store.Tx) (err error) { all, _, err = tx.JoinTokens(store.Page{}); return err })
	for _, tok := range all {
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
	resp, err := f.svc.Join(context.Background(), req)
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

func TestJoinRefuses(t *testing.T) {
	other, _ := ecdh.X25519().GenerateKey(rand.Reader)
	cases := map[string]struct {
		// build mints what it needs and returns the request.
		build  func(t *testing.T, f *fixture) joinwire.Request
		code   proto.Code
		reason string
		path   string
		// keeps says the token must still be unused afterwards.
		keeps bool
	}{
		"second use": {
			build: func(t *testing.T, f *fixture) joinwire.Request {
				_, secret := f.mint(t, store.TokenProvisioned, "n1", "", 0)
				first, _ := request(t, f.keys.JoinEncryptionKey(), "n1", "node", secret)
				if _, err := f.svc.Join(context.Background(), first); err != nil {
					t.Fatal(err)
				}
				req, _ := request(t, f.keys.JoinEncryptionKey(), "n1", "node", secret)
				return req
			},
			code: proto.Unauthenticated, reason: "token-used",
		},
		"expired": {
			build: func(t *testing.T, f *fixture) joinwire.Request {
				_, secret := f.mint(t, store.TokenProvisioned, "n1", "", 0)
				f.clock.Advance(2 * time.Hour)
				req, _ := request(t, f.keys.JoinEncryptionKey(), "n1", "node", secret)
				return req
			},
			code: proto.Unauthenticated, reason: "token-expired", keeps: true,
		},
		"another node id": {
			build: func(t *testing.T, f *fixture) joinwire.Request {
				_, secret := f.mint(t, store.TokenProvisioned, "n1", "", 0)
				req, _ := request(t, f.keys.JoinEncryptionKey(), "n2", "node", secret)
				return req
			},
			code: proto.Forbidden, reason: "identity", keeps: true,
		},
		"site token as a node": {
			build: func(t *testing.T, f *fixture) joinwire.Request {
				_, secret := f.mint(t, store.TokenSite, "", "rack-a", 0)
				req, _ := request(t, f.keys.JoinEncryptionKey(), "rack-a", "node", secret)
				return req
			},
			code: proto.Forbidden, reason: "role", keeps: true,
		},
		"sealed to another key": {
			build: func(t *testing.T, f *fixture) joinwire.Request {
				_, secret := f.mint(t, store.TokenProvisioned, "n1", "", 0)
				req, _ := request(t, other.PublicKey(), "n1", "node", secret)
				return req
			},
			code: proto.Unauthenticated, reason: "sealed-token", keeps: true,
		},
		"sealed for another node": {
			build: func(t *testing.T, f *fixture) joinwire.Request {
				_, secret := f.mint(t, store.TokenProvisioned, "n1", "", 0)
				req, _ := request(t, f.keys.JoinEncryptionKey(), "n1", "node", secret)
				req.NodeID = "n2"
				return req
			},
			code: proto.Unauthenticated, reason: "sealed-token", keeps: true,
		},
		"key swapped": {
			build: func(t *testing.T, f *fixture) joinwire.Request {
				_, secret := f.mint(t, store.TokenProvisioned, "n1", "", 0)
				req, _ := request(t, f.keys.JoinEncryptionKey(), "n1", "node", secret)
				swap, _ := request(t, f.keys.JoinEncryptionKey(), "n1", "node", secret)
				req.PublicKey = swap.PublicKey
				return req
			},
			code: proto.Unauthenticated, reason: "sealed-token", keeps: true,
		},
		"not a token": {
			build: func(t *testing.T, f *fixture) joinwire.Request {
				req, _ := request(t, f.keys.JoinEncryptionKey(), "n1", "node", "hello")
				return req
			},
			code: proto.Unauthenticated, reason: "token-invalid",
		},
		"revoked node": {
			build: func(t *testing.T, f *fixture) joinwire.Request {
				node, secret := f.revokedNode(t)
				req, _ := request(t, f.keys.JoinEncryptionKey(), node, "node", secret)
				return req
			},
			code: proto.Forbidden, reason: "identity-revoked", keeps: true,
		},
		"bad role": {
			build: func(t *testing.T, f *fixture) joinwire.Request {
				req, _ := request(t, f.keys.JoinEncryptionKey(), "n1", "root", "x")
				return req
			},
			code: proto.InvalidInput, path: "role",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			req := tc.build(t, f)
			_, err := f.svc.Join(context.Background(), req)
			e := proto.AsError(err)
			if e.Code != tc.code || e.Details.Reason != tc.reason || e.Details.Path != tc.path {
				t.Fatalf("got %v (reason %q, path %q), want %s %q %q", err, e.Details.Reason, e.Details.Path, tc.code, tc.reason, tc.path)
			}
			if tc.keeps {
				var all []store.JoinToken
				f.store.View(func(tx *store.Tx) (err error) { all, _, err = tx.JoinTokens(store.Page{}); return err })
				for _, tok := range all {
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
			_, errs[i] = f.svc.Join(context.Background(), reqs[i])
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
		path             string
	}{
		"provisioned default 2h": {kind: "provisioned", node: "n1", want: minted{"provisioned", "n1", "", now.Add(2 * time.Hour)}},
		"ramdisk default 1h":     {kind: "ramdisk", node: "n1", site: "rack-a", want: minted{"ramdisk", "n1", "rack-a", now.Add(time.Hour)}},
		"site default 24h":       {kind: "site", site: "rack-a", want: minted{"site", "rack-a", "rack-a", now.Add(24 * time.Hour)}},
		"site with node id":      {kind: "site", node: "rack-a-2", site: "rack-a", ttl: time.Minute, want: minted{"site", "rack-a-2", "rack-a", now.Add(time.Minute)}},
		"unknown kind":           {kind: "root", node: "n1", path: "kind"},
		"site without site":      {kind: "site", node: "n1", path: "site"},
		"bad site":               {kind: "site", site: "Rack A", path: "site"},
		"node without node id":   {kind: "provisioned", path: "nodeId"},
		"bad node id":            {kind: "provisioned", node: "n 1", path: "nodeId"},
		"ttl too long":           {kind: "provisioned", node: "n1", ttl: 31 * 24 * time.Hour, path: "ttlSeconds"},
		"ttl negative":           {kind: "provisioned", node: "n1", ttl: -time.Hour, path: "ttlSeconds"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var tok store.JoinToken
			err := f.store.Update(func(tx *store.Tx) (err error) {
				tok, _, err = MintToken(tx, tc.kind, tc.node, tc.site, tc.ttl)
				return err
			})
			if tc.path != "" {
				if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != tc.path {
					t.Fatalf("got %v, want INVALID_INPUT at %s", err, tc.path)
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
		_, _, err := MintToken(tx, store.TokenRamdisk, node, "rack-a", 0)
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
	if _, err := f.svc.Join(context.Background(), used); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(Retention + 2*time.Hour)
	recent, _ := f.mint(t, store.TokenProvisioned, "n3", "", time.Hour) // not expired yet
	f.clock.Advance(2 * time.Hour)                                      // expired, within retention
	var pruned int
	if err := f.store.Update(func(tx *store.Tx) (err error) { pruned, err = PruneTokens(tx); return err }); err != nil {
		t.Fatal(err)
	}
	var left []string
	f.store.View(func(tx *store.Tx) error {
		all, _, err := tx.JoinTokens(store.Page{})
		for _, tok := range all {
			left = append(left, tok.ID)
		}
		return err
	})
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
	der, err := Renew(f.store, f.keys, "rack-a", "site", spki)
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
	if _, err := Renew(f.store, f.keys, "rack-a", "site", spki384); proto.CodeOf(err) != proto.InvalidInput {
		t.Errorf("a P-384 key: got %v, want INVALID_INPUT", err)
	}
	node, _ := f.revokedNode(t)
	if _, err := Renew(f.store, f.keys, node, "node", spki); proto.AsError(err).Details.Reason != "identity-revoked" {
		t.Errorf("a revoked node: got %v, want FORBIDDEN identity-revoked", err)
	}
}
