package site

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
)

// TestExpandBMC: a BMC command gets the credential of the node's own tenant, or the
// platform's where a root-tenant credential bound it, only on its way to the agent of the
// node's site and only for the address the node's BMC was enrolled with.
func TestExpandBMC(t *testing.T) {
	st := openStore(t)
	box, err := secret.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	login := func(user, pass string) []byte {
		b, _ := json.Marshal(map[string]string{"username": user, "password": pass})
		return b
	}
	nodes := map[string]store.Node{}
	err = st.Update(func(tx *store.Tx) error {
		if _, err := tx.CreateSite("rack-b"); err != nil {
			return err
		}
		if _, err := tx.SetSiteBMCNetworks("rack-a", []string{"10.20.0.0/16"}); err != nil {
			return err
		}
		for tenant, secrets := range map[string]map[string][]byte{
			store.RootTenant: {"secret://rack-bmc": login("admin", "platform-pass")},
			"acme":           {"secret://own-bmc": login("acme", "acme-pass"), "secret://not-a-login": []byte("hunter2")},
		} {
			for ref, v := range secrets {
				if _, _, err := box.PutTenant(tx, tenant, ref, v); err != nil {
					return err
				}
			}
		}
		for i, n := range []struct {
			name, ref string
			platform  bool
		}{
			{"own", "secret://own-bmc", false},
			{"platform", "secret://platform/rack-bmc", true},
			{"forged", "secret://platform/rack-bmc", false},
			{"root-named", "secret://rack-bmc", false},
			{"garbled", "secret://not-a-login", false},
		} {
			node, err := tx.CreateNode(store.Node{Tenant: "acme", Pool: "gpu", MACs: []string{"52:54:00:00:00:0" + string(rune('1'+i))},
				BMC: store.BMC{Driver: "redfish", Address: "https://10.20.0.5", CredentialRef: n.ref}, PlatformBMC: n.platform})
			if err != nil {
				return err
			}
			nodes[n.name] = node
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	command := func(node store.Node, kind, address string) proto.Command {
		config, _ := json.Marshal(map[string]string{"address": address, "credentialRef": node.BMC.CredentialRef})
		b := proto.DriverBinding{Driver: "redfish", Config: config}
		payload, _ := json.Marshal(proto.SiteCommand{Node: node.ID, Drivers: map[string]proto.DriverBinding{"power": b, "management": b, "boot": {Driver: "ipxe"}},
			Input: json.RawMessage(`{"action":"on"}`)})
		return proto.Command{ID: "c1", Kind: kind, Payload: payload}
	}
	for name, tc := range map[string]struct {
		cmd   proto.Command
		agent string
		user  string // the credential attached, when no error
		code  proto.Code
	}{
		"the tenant's own secret":                 {cmd: command(nodes["own"], "power.setPower", "https://10.20.0.5"), agent: "rack-a", user: "acme"},
		"the platform's, bound by the platform":   {cmd: command(nodes["platform"], "management.setBootDevice", "https://10.20.0.5"), agent: "rack-a", user: "admin"},
		"the platform's, not bound by it":         {cmd: command(nodes["forged"], "power.getPower", "https://10.20.0.5"), agent: "rack-a", code: proto.Forbidden},
		"a root secret's name in the tenant's":    {cmd: command(nodes["root-named"], "power.setPower", "https://10.20.0.5"), agent: "rack-a", code: proto.NotFound},
		"a secret that is not a login":            {cmd: command(nodes["garbled"], "power.setPower", "https://10.20.0.5"), agent: "rack-a", code: proto.InvalidConfig},
		"another site's agent":                    {cmd: command(nodes["own"], "power.setPower", "https://10.20.0.5"), agent: "rack-b", code: proto.Forbidden},
		"a binding naming another address":        {cmd: command(nodes["platform"], "power.setPower", "https://10.99.0.5"), agent: "rack-a", code: proto.Forbidden},
		"a command that does not reach the BMC":   {cmd: command(nodes["platform"], "boot.cleanUp", "https://10.20.0.5"), agent: "rack-a"},
		"the platform's, for an inventory of OOB": {cmd: command(nodes["platform"], "inspect.oob", "https://10.20.0.5"), agent: "rack-a", user: "admin"},
	} {
		t.Run(name, func(t *testing.T) {
			var out proto.Command
			err := st.View(func(tx *store.Tx) (err error) { out, err = ExpandBMC(tx, box, tc.agent, tc.cmd); return err })
			if tc.code != "" {
				if proto.CodeOf(err) != tc.code {
					t.Fatalf("got %v, want %s", err, tc.code)
				}
				if strings.Contains(err.Error(), "-pass") || strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("the refusal shows a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var sc proto.SiteCommand
			if err := json.Unmarshal(out.Payload, &sc); err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.user == "" && sc.Credential != nil:
				t.Fatalf("credential %v attached to %s", sc.Credential, tc.cmd.Kind)
			case tc.user != "" && (sc.Credential == nil || sc.Credential.Username != tc.user || sc.Credential.Password != tc.user+"-pass" && sc.Credential.Password != "platform-pass"):
				t.Fatalf("credential %v, want %s's", sc.Credential, tc.user)
			}
		})
	}
	// A site whose BMC networks no longer hold the address gets no credential.
	st.Update(func(tx *store.Tx) error {
		_, err := tx.SetSiteBMCNetworks("rack-a", []string{"10.30.0.0/16"})
		return err
	})
	err = st.View(func(tx *store.Tx) error {
		_, err := ExpandBMC(tx, box, "rack-a", command(nodes["own"], "power.setPower", "https://10.20.0.5"))
		return err
	})
	if proto.CodeOf(err) != proto.Forbidden || proto.AsError(err).Details.Reason != proto.ReasonBMCAddressNotAllowed {
		t.Fatalf("an address outside the site's networks: %v, want FORBIDDEN, reason %s", err, proto.ReasonBMCAddressNotAllowed)
	}
}
