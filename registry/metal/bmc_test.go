package metal

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// TestUpdateBMC: a tenant's change of a BMC the platform bound drops the platform's
// credential; only a root-tenant credential binds it again; every change is checked as
// an enrollment is, and a refused one changes nothing.
func TestUpdateBMC(t *testing.T) {
	h := newHarness(t)
	var node store.Node
	var enrolling store.Run
	err := h.store.Update(func(tx *store.Tx) (err error) {
		node, enrolling, err = h.svc.Enroll(tx, Enrollment{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:01"}, Platform: true,
			BMC:     store.BMC{Driver: "redfish", Address: "https://10.0.0.5", CredentialRef: "secret://platform/rack-bmc"},
			Drivers: map[string]Binding{"power": {Driver: "redfish", Config: json.RawMessage(`{"options":{"auth":"basic"}}`)}}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	update := func(u BMCUpdate) (n store.Node, err error) {
		u.Tenant, u.Node = "acme", node.ID
		err = h.store.Update(func(tx *store.Tx) (err error) { n, err = h.svc.UpdateBMC(tx, u); return err })
		return n, err
	}
	// A node whose enrollment runs keeps its BMC until the workflow ends.
	if _, err := update(BMCUpdate{Address: "https://10.0.0.8"}); proto.CodeOf(err) != proto.InvalidState || proto.AsError(err).Details.Reason != store.NodeEnrolling {
		t.Fatalf("an enrolling node: %v, want INVALID_STATE, reason enrolling", err)
	}
	h.svc.Start(enrolling)
	h.end(enrolling.ID)
	rev := h.node(node.ID).Rev
	ref := func(s string) *string { return &s }
	for name, tc := range map[string]struct {
		u          BMCUpdate
		code       proto.Code
		path       string
		tenantNode string
	}{
		"the platform's credential, named by a tenant": {u: BMCUpdate{CredentialRef: ref("secret://platform/other")}, code: proto.Forbidden, path: "bmc.credentialRef"},
		"a credential file":                            {u: BMCUpdate{CredentialRef: ref("/etc/shadow")}, code: proto.InvalidInput, path: "bmc.credentialRef"},
		"an address outside the site's networks":       {u: BMCUpdate{Address: "https://10.0.1.9"}, code: proto.InvalidInput, path: "bmc.address"},
		"a host name":                                  {u: BMCUpdate{Address: "https://bmc.example"}, code: proto.InvalidInput, path: "bmc.address"},
		"another tenant's node":                        {u: BMCUpdate{Address: "https://10.0.0.6"}, code: proto.NotFound, path: "nodeId", tenantNode: "globex"},
	} {
		u := tc.u
		var err error
		if tc.tenantNode != "" {
			u.Tenant, u.Node = tc.tenantNode, node.ID
			err = h.store.Update(func(tx *store.Tx) error { _, err := h.svc.UpdateBMC(tx, u); return err })
		} else {
			_, err = update(u)
		}
		if proto.CodeOf(err) != tc.code || proto.AsError(err).Details.Path != tc.path {
			t.Errorf("%s: %v, want %s at %s", name, err, tc.code, tc.path)
		}
	}
	h.store.View(func(tx *store.Tx) (err error) { node, err = tx.Node(node.ID); return err })
	if node.BMC.CredentialRef != "secret://platform/rack-bmc" || !node.PlatformBMC || node.Rev != rev {
		t.Fatalf("a refused change changed the node: %+v", node)
	}

	// The tenant moves the BMC: the platform's credential does not follow it.
	moved, err := update(BMCUpdate{Address: "https://10.0.0.7"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"address":"https://10.0.0.7","options":{"auth":"basic"}}`
	if moved.BMC.CredentialRef != "" || moved.PlatformBMC || string(moved.Drivers["power"].Config) != want {
		t.Fatalf("after the tenant's move: BMC %+v, platform %v, power %s; want no credential and %s", moved.BMC, moved.PlatformBMC, moved.Drivers["power"].Config, want)
	}
	// The tenant names its own; the platform binds its own again.
	if n, err := update(BMCUpdate{CredentialRef: ref("secret://bmc/own")}); err != nil || n.BMC.CredentialRef != "secret://bmc/own" || n.PlatformBMC {
		t.Fatalf("the tenant's own credential: %+v, %v", n.BMC, err)
	}
	n, err := update(BMCUpdate{CredentialRef: ref("secret://platform/rack-bmc"), Platform: true})
	if err != nil || !n.PlatformBMC || string(n.Drivers["management"].Config) != `{"address":"https://10.0.0.7","credentialRef":"secret://platform/rack-bmc"}` {
		t.Fatalf("the platform binding again: %+v, %s, %v", n.BMC, n.Drivers["management"].Config, err)
	}
	// A node whose workflow runs keeps its BMC until the workflow ends.
	h.machine.bootsNothing = true
	if _, _, err := h.act(node.ID, Inspect, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := update(BMCUpdate{Address: "https://10.0.0.8"}); proto.CodeOf(err) != proto.InvalidState || proto.AsError(err).Details.Reason != store.NodeInspecting {
		t.Fatalf("an inspecting node: %v, want INVALID_STATE, reason inspecting", err)
	}
}

// TestBMCOfAnotherTenant: a tenant that names another tenant's BMC, enrolling or moving
// its own node's, is refused CONFLICT at bmc.address without that tenant's node, and
// nothing changes.
func TestBMCOfAnotherTenant(t *testing.T) {
	h := newHarness(t)
	acme, run := h.startEnroll("52:54:00:00:00:01", nil)
	h.end(run.ID)
	err := h.store.Update(func(tx *store.Tx) error {
		if _, err := tx.CreateTenant("beta"); err != nil {
			return err
		}
		_, err := tx.CreatePool(store.Pool{Tenant: "beta", Name: "gpu", Site: "rack-a"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	enroll := func(mac, address string) (n store.Node, run store.Run, err error) {
		err = h.store.Update(func(tx *store.Tx) (err error) {
			n, run, err = h.svc.Enroll(tx, Enrollment{Tenant: "beta", Pool: "gpu", MACs: []string{mac},
				BMC: store.BMC{Driver: "redfish", Address: address, CredentialRef: "secret://bmc/beta"}})
			return err
		})
		return n, run, err
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: bound; want CONFLICT at bmc.address", what)
			return
		}
		if e := proto.AsError(err); e.Code != proto.Conflict || e.Details.Path != "bmc.address" ||
			!strings.Contains(e.Message, "another tenant") || strings.Contains(e.Message, acme.ID) || strings.Contains(e.Message, "acme") {
			t.Errorf("%s: %v; want CONFLICT at bmc.address, by another tenant, naming neither acme nor its node", what, err)
		}
	}
	_, _, err = enroll("52:54:00:00:00:02", "10.0.0.5:443")
	refused("beta enrolling with acme's BMC", err)
	h.store.View(func(tx *store.Tx) error {
		if nodes, _, _ := tx.Nodes("beta", "", "", store.Page{}); len(nodes) != 0 {
			t.Errorf("the refused enrollment left nodes %+v", nodes)
		}
		return nil
	})

	beta, run, err := enroll("52:54:00:00:00:02", "https://10.0.0.6")
	if err != nil {
		t.Fatal(err)
	}
	h.svc.Start(run)
	h.end(run.ID)
	before := h.node(beta.ID)
	err = h.store.Update(func(tx *store.Tx) error {
		_, err := h.svc.UpdateBMC(tx, BMCUpdate{Tenant: "beta", Node: beta.ID, Address: "https://10.0.0.5:8443"})
		return err
	})
	refused("beta moving its node to acme's BMC", err)
	if after := h.node(beta.ID); after.Rev != before.Rev || after.BMC != before.BMC {
		t.Errorf("the refused move changed beta's node: %+v, was %+v", after.BMC, before.BMC)
	}
}
