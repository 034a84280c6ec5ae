package registry

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/bcdconf"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// revokedSays is what an agent logs of the refusals of a certificate an operator
// revoked (store.Revocation's refusal, the close reason of its session and hellos).
const revokedSays = "was revoked on"

// certificateEpoch is the identity epoch of the certificate creds hold.
func certificateEpoch(t *testing.T, creds bcdconf.Agent) int64 {
	t.Helper()
	cert, err := x509.ParseCertificate(creds.Certificate.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := proto.IdentityEpoch(cert)
	if err != nil {
		t.Fatal(err)
	}
	return epoch
}

// TestRevokedNodeAgentCertificates: a machine's installed OS is compromised while it
// runs, and its ramdisk's certificate may have leaked with it. A revocation another
// replica made (metal's, without this replica's sessions ended) makes the open session
// of the OS's certificate get no secret and no renewal, FORBIDDEN with the reason
// revoked and the operator's words. Another tenant's nodes.revokeCertificates of the node is
// NOT_FOUND and ends nothing; its own tenant's ends both agents' sessions, every later
// hello of them is refused so, the node's unused join token is gone, and the node's
// event log holds the revocation with its reason and credential. The node keeps its
// state, and its OS joins again with a token minted after: a certificate of the new
// epoch, which gets the secret and renews. Before site and node certificates could be
// revoked without retiring the machine, the leaked certificates worked for a year.
func TestRevokedNodeAgentCertificates(t *testing.T) {
	f := startBusyFleet(t)
	n := storetest.Node(t, f.r.st, store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:0a:01"}})
	node, ref := n.ID, "secret://k8s/join"
	f.secretNamed(n, ref)
	ep := f.r.plane.ep

	kept, refused, stop := f.firstInstallation(node, proto.RoleNode, store.TokenProvisioned)
	defer stop()
	defer f.working(node)() // the workflow whose ramdisk it is runs
	ramdiskCreds, err := f.join(node, "ramdisk", f.mint(store.TokenRamdisk, node))
	f.must(err, "the ramdisk's join")
	ramdiskRefused := &refusals{}
	ramdisk := &roleAgent{log: slog.New(ramdiskRefused)}
	defer ramdisk.run(f, node, ramdiskCreds)()
	f.wait("the ramdisk's session", func() bool { return ep.Connected(node, proto.RoleRamdisk) })
	unused := f.mint(store.TokenProvisioned, node)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	f.must(err, "a key")
	if v, err := kept.s.Secret(ctx, ref); err != nil || string(v) != "join-token" {
		t.Fatalf("before the revocation: secret %q, %v", v, err)
	}

	// Another tenant cannot revoke the node, nor learn it exists.
	_, err = call[api.CertificatesRevoked](f.tenants["globex"], "metal.revokeCertificates", api.RevokeNodeCertificatesRequest{NodeID: node})
	if err == nil || proto.AsError(err).Code != proto.NotFound || proto.AsError(err).Details.Path != "nodeId" || strings.Contains(err.Error(), "acme") {
		t.Errorf("another tenant revoking the node: %v, want NOT_FOUND at nodeId naming no tenant", err)
	}
	if !ep.Connected(node, proto.RoleNode) || !ep.Connected(node, proto.RoleRamdisk) {
		t.Errorf("another tenant's refused revocation ended the node's sessions")
	}

	// A revocation this registry has not heard of yet (another replica's, its watch
	// behind): the session held here is still open, and gets nothing.
	before, ramdiskBefore := refused.count(revokedSays), ramdiskRefused.count(revokedSays)
	hear := f.commitUnheard(store.BucketNodes, "revoking the node's agents", func(tx *store.Tx) error {
		_, err := f.r.metal.RevokeAgents(tx, "acme", node, "OS compromised", "")
		return err
	})
	kept.getsNoSecretNorRenewal(ctx, t, ref, key, proto.ReasonRevoked, "OS compromised")

	// Once the registry hears of it, both sessions end, and every later hello is refused.
	hear()
	f.wait("both sessions ended, and the next hello of each refused", func() bool {
		return refused.count(revokedSays) >= before+2 && ramdiskRefused.count(revokedSays) >= ramdiskBefore+2 &&
			!ep.Connected(node, proto.RoleNode) && !ep.Connected(node, proto.RoleRamdisk)
	})

	// Its own tenant revokes again through the API.
	out, err := call[api.CertificatesRevoked](f.tenants["acme"], "metal.revokeCertificates", api.RevokeNodeCertificatesRequest{NodeID: node, Reason: "OS compromised, again"})
	f.must(err, "metal.revokeCertificates")
	if out.NodeID != node || out.IdentityEpoch != 2 || out.Reason != "OS compromised, again" || out.JoinTokensDeleted != 0 {
		t.Errorf("metal.revokeCertificates answered %+v, want node %s at epoch 2, the reason, no token left to delete", out, node)
	}
	var events []store.Event
	f.must(f.r.st.View(func(tx *store.Tx) error {
		all, _, err := tx.Events(node, "", store.Page{})
		for _, e := range all {
			if e.Kind == store.EventAgentsRevoked {
				events = append(events, e)
			}
		}
		if err == nil {
			n, err = tx.Node(node)
		}
		return err
	}), "reading the node and its events")
	if len(events) != 2 || events[1].To != "epoch 2" || !strings.Contains(events[1].Detail, "OS compromised, again") ||
		!strings.Contains(events[1].Detail, f.credentials["acme"]) {
		t.Errorf("the node's revocation events: %+v, want two, the last at epoch 2 with the reason and acme's credential %s", events, f.credentials["acme"])
	}
	if n.State != store.NodeActive || !n.IdentityRevokedAt.IsZero() {
		t.Errorf("after the revocation the node is %s, identity revoked at %v: want it active, its identity held", n.State, n.IdentityRevokedAt)
	}

	// The token minted before the revocation is gone; one minted after joins the OS again.
	if _, err := f.join(node, "node", unused); proto.CodeOf(err) != proto.Unauthenticated {
		t.Errorf("joining with the token minted before the revocation: %v, want UNAUTHENTICATED", err)
	}
	again, err := f.join(node, "node", f.mint(store.TokenProvisioned, node))
	f.must(err, "the join after the revocation")
	if epoch := certificateEpoch(t, again); epoch != 2 {
		t.Errorf("the new certificate names epoch %d, want 2", epoch)
	}
	current := &roleAgent{}
	defer current.run(f, node, again)()
	f.wait("the new certificate's session", func() bool { return ep.Connected(node, proto.RoleNode) })
	if v, err := current.s.Secret(ctx, ref); err != nil || string(v) != "join-token" {
		t.Errorf("the new certificate: secret %q, %v; want its value", v, err)
	}
	if _, err := current.s.Renew(ctx, key); err != nil {
		t.Errorf("the new certificate's renewal: %v", err)
	}
}

// TestRevokedSiteAgentCertificates: a rack server is stolen with its site agent's key.
// A revocation another replica made leaves the session held here open, and its
// certificate renews no more (FORBIDDEN, revoked). A tenant's sites.revokeCertificates
// is FORBIDDEN and ends nothing; the platform's ends the site agent's session and every
// later hello of it is refused, so a command relayed to the site from then on (a BMC
// command would carry the BMC's credential) waits and never reaches it; the site's
// unused token is gone. The agent joined again with a site token minted after holds a
// certificate of the new epoch, and takes the waiting command. Before site certificates
// named an epoch, nothing refused a stolen one.
func TestRevokedSiteAgentCertificates(t *testing.T) {
	f := startBusyFleet(t)
	ep := f.r.plane.ep
	creds, err := f.join("rack-a", "site", f.mint(store.TokenSite, "rack-a"))
	f.must(err, "the site agent's join")
	if epoch := certificateEpoch(t, creds); epoch != 0 {
		t.Errorf("the first site certificate names epoch %d, want 0", epoch)
	}
	refused := &refusals{}
	kept := &roleAgent{log: slog.New(refused)}
	defer kept.run(f, "rack-a", creds)()
	f.wait("the site agent's session", func() bool { return ep.Connected("rack-a", proto.RoleSite) })
	unused := f.mint(store.TokenSite, "rack-a")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	echo := func(id string) chan error {
		ch := make(chan error, 1)
		go func() {
			_, err := ep.Relay(ctx, "rack-a", proto.RoleSite, proto.Command{ID: id, Kind: "echo", Payload: json.RawMessage(`{"ID": "` + id + `"}`)})
			ch <- err
		}()
		return ch
	}
	if err := <-echo("before"); err != nil {
		t.Fatalf("a command relayed to the site before the revocation: %v", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	f.must(err, "a key")

	// A tenant cannot revoke a site's agent.
	_, err = call[api.CertificatesRevoked](f.tenants["acme"], "sites.revokeCertificates", api.RevokeSiteCertificatesRequest{SiteID: "rack-a"})
	if proto.CodeOf(err) != proto.Forbidden {
		t.Errorf("a tenant revoking the site's agent: %v, want FORBIDDEN", err)
	}
	if !ep.Connected("rack-a", proto.RoleSite) {
		t.Errorf("a tenant's refused revocation ended the site agent's session")
	}

	// A revocation this registry has not heard of yet (another replica's): the session
	// held here is still open, and renews nothing.
	f.settled(kept, "rack-a", proto.RoleSite)
	before := refused.count(revokedSays)
	hear := f.commitUnheard(store.BucketSites, "revoking the site's agent", func(tx *store.Tx) error {
		_, _, err := tx.RevokeSiteAgent("rack-a", store.Revocation{Reason: "rack server stolen"})
		return err
	})
	if _, err := kept.s.Renew(ctx, key); proto.CodeOf(err) != proto.Forbidden || proto.AsError(err).Details.Reason != proto.ReasonRevoked ||
		!strings.Contains(err.Error(), "rack server stolen") {
		t.Errorf("the revoked site certificate's renewal: %v, want FORBIDDEN %s with the reason", err, proto.ReasonRevoked)
	}

	// Once the registry hears of it, the session ends, and every later hello is refused.
	hear()
	f.wait("the site agent's session ended, and its next hello refused", func() bool {
		return refused.count(revokedSays) >= before+2 && !ep.Connected("rack-a", proto.RoleSite)
	})

	// The platform revokes again through the API.
	out, err := call[api.CertificatesRevoked](f.admin, "sites.revokeCertificates", api.RevokeSiteCertificatesRequest{SiteID: "rack-a", Reason: "rack server stolen"})
	f.must(err, "sites.revokeCertificates")
	if out.SiteID != "rack-a" || out.IdentityEpoch != 2 || out.JoinTokensDeleted != 0 {
		t.Errorf("sites.revokeCertificates answered %+v, want rack-a at epoch 2, no token left to delete", out)
	}

	// A command relayed to the site now waits; the revoked agent, trying again, is
	// refused before any hello could hand it the command.
	waiting := echo("after")
	f.wait("the command stored for the site", func() bool {
		var pending []store.AgentCommand
		f.r.st.View(func(tx *store.Tx) (err error) { pending, err = tx.PendingAgentCommands("rack-a"); return err })
		return len(pending) == 1
	})
	before = refused.count(revokedSays)
	f.wait("two more hellos of the revoked agent refused", func() bool { return refused.count(revokedSays) >= before+2 })
	select {
	case err := <-waiting:
		t.Fatalf("the command answered with only the revoked agent running: %v", err)
	default:
	}
	if got := kept.received("echo"); len(got) != 1 {
		t.Errorf("the revoked agent was sent %d commands, want only the one before the revocation", len(got))
	}

	// The token minted before the revocation is gone; one minted after joins the agent.
	if _, err := f.join("rack-a", "site", unused); proto.CodeOf(err) != proto.Unauthenticated {
		t.Errorf("joining with the site token minted before the revocation: %v, want UNAUTHENTICATED", err)
	}
	again, err := f.join("rack-a", "site", f.mint(store.TokenSite, "rack-a"))
	f.must(err, "the site agent's join after the revocation")
	if epoch := certificateEpoch(t, again); epoch != 2 {
		t.Errorf("the new site certificate names epoch %d, want 2", epoch)
	}
	current := &roleAgent{}
	defer current.run(f, "rack-a", again)()
	if err := <-waiting; err != nil {
		t.Errorf("the waiting command, once the agent joined again: %v", err)
	}
	if _, err := current.s.Renew(ctx, key); err != nil {
		t.Errorf("the new site certificate's renewal: %v", err)
	}
}
