package secret

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// k8sJoin is a host section with one k8s-join unit naming ref.
func k8sJoin(ref string) []proto.HostUnit {
	return []proto.HostUnit{{Unit: "k8s-join", Settings: json.RawMessage(`{"server": "https://10.0.0.1:6443", "caCertSha256": "` +
		strings.Repeat("ab", 32) + `", "tokenRef": "` + ref + `"}`)}}
}

// TestForAgentAuthorization runs the rule over a real store: two tenants each with a
// node whose NodeSpec names secrets, and secrets of both tenants under the same names.
func TestForAgentAuthorization(t *testing.T) {
	st, box := openTest(t)
	nodes := map[string]string{} // name -> node id
	err := st.Update(func(tx *store.Tx) error {
		if _, err := tx.CreateSite("rack-a"); err != nil {
			return err
		}
		for _, tenant := range []string{"acme", "globex"} {
			if _, err := tx.CreateTenant(tenant); err != nil {
				return err
			}
			if _, err := tx.CreatePool(store.Pool{Tenant: tenant, Name: "gpu", Site: "rack-a"}); err != nil {
				return err
			}
		}
		for name, tenant := range map[string]string{"acme": "acme", "globex": "globex", "bare": "acme", "revoked": "acme"} {
			n, err := tx.CreateNode(store.Node{Tenant: tenant, Pool: "gpu", MACs: []string{"52:54:00:00:00:0" + string(rune('1'+len(nodes)))}})
			if err != nil {
				return err
			}
			nodes[name] = n.ID
		}
		specs := map[string][]proto.HostUnit{
			"acme":    k8sJoin("secret://k8s/join"),
			"globex":  append(k8sJoin("secret://k8s/acme-only"), k8sJoin("secret://k8s/nobody")...),
			"revoked": k8sJoin("secret://k8s/join"),
		}
		for name, host := range specs {
			if _, err := tx.SetNodeSpec(proto.NodeSpec{Node: nodes[name], Role: proto.RoleNode, Host: host}); err != nil {
				return err
			}
		}
		if _, err := tx.UpdateNode(nodes["revoked"], func(n *store.Node) error { n.IdentityRevokedAt = tx.Now(); return nil }); err != nil {
			return err
		}
		for _, s := range []struct{ tenant, ref, value string }{
			{"acme", "secret://k8s/join", "abcdef.0123456789abcdef"},
			{"acme", "secret://k8s/other", "value-of-acme-other"},
			{"acme", "secret://k8s/acme-only", "value-of-acme-only"},
			{"globex", "secret://k8s/join", "value-of-globex-join"},
		} {
			if _, _, err := box.PutTenant(tx, s.tenant, s.ref, []byte(s.value)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	cases := map[string]struct {
		node string
		role proto.Role
		ref  string
		want string     // the value, when served
		code proto.Code // the refusal
	}{
		"referenced ref served":              {node: nodes["acme"], role: proto.RoleNode, ref: "secret://k8s/join", want: "abcdef.0123456789abcdef"},
		"the same node's ramdisk":            {node: nodes["acme"], role: proto.RoleRamdisk, ref: "secret://k8s/join", code: proto.Forbidden},
		"a site agent":                       {node: "rack-a", role: proto.RoleSite, ref: "secret://k8s/join", code: proto.Forbidden},
		"a tenant secret it does not name":   {node: nodes["acme"], role: proto.RoleNode, ref: "secret://k8s/other", code: proto.Forbidden},
		"a node without a NodeSpec":          {node: nodes["bare"], role: proto.RoleNode, ref: "secret://k8s/join", code: proto.Forbidden},
		"an unenrolled node":                 {node: "nd_ghost", role: proto.RoleNode, ref: "secret://k8s/join", code: proto.Forbidden},
		"a revoked node":                     {node: nodes["revoked"], role: proto.RoleNode, ref: "secret://k8s/join", code: proto.Forbidden},
		"another tenant's secret it names":   {node: nodes["globex"], role: proto.RoleNode, ref: "secret://k8s/acme-only", code: proto.NotFound},
		"a secret nobody put":                {node: nodes["globex"], role: proto.RoleNode, ref: "secret://k8s/nobody", code: proto.NotFound},
		"a name both tenants use, not named": {node: nodes["globex"], role: proto.RoleNode, ref: "secret://k8s/join", code: proto.Forbidden},
		"no secret reference":                {node: nodes["acme"], role: proto.RoleNode, ref: "secret://k8s/../join", code: proto.InvalidInput},
	}
	answers := map[string]string{}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got []byte
			err := st.View(func(tx *store.Tx) (err error) { got, err = box.ForAgent(tx, tc.node, tc.role, tc.ref); return err })
			if tc.code == "" {
				if err != nil || string(got) != tc.want {
					t.Fatalf("got %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if proto.CodeOf(err) != tc.code || got != nil {
				t.Fatalf("got %q, %v; want %s", got, err, tc.code)
			}
			for _, v := range []string{"abcdef", "value-of"} {
				if strings.Contains(err.Error(), v) {
					t.Errorf("the refusal %q shows a value", err)
				}
			}
			answers[name] = strings.ReplaceAll(err.Error(), tc.ref, "REF")
		})
	}
	// Whether another tenant has the secret changes nothing in the answer.
	if a, b := answers["another tenant's secret it names"], answers["a secret nobody put"]; a != b {
		t.Errorf("the answers differ:\n%s\n%s", a, b)
	}
}

// TestTenantSecrets checks the put rules, replacing, and that a ciphertext copied under
// another tenant's name does not open there.
func TestTenantSecrets(t *testing.T) {
	st, box := openTest(t)
	for name, tc := range map[string]struct {
		ref   string
		value []byte
		path  string
	}{
		"plain token as ref": {"abcdef.0123456789abcdef", []byte("x"), "ref"},
		"dot dot":            {"secret://k8s/../x", []byte("x"), "ref"},
		"empty":              {"secret://k8s/x", nil, "value"},
		"too large":          {"secret://k8s/x", make([]byte, MaxValue+1), "value"},
	} {
		t.Run(name, func(t *testing.T) {
			err := st.Update(func(tx *store.Tx) error { _, _, err := box.PutTenant(tx, "acme", tc.ref, tc.value); return err })
			if e := proto.AsError(err); e.Code != proto.InvalidInput || e.Details.Path != tc.path {
				t.Fatalf("got %v, want INVALID_INPUT at %s", err, tc.path)
			}
		})
	}
	put := func(tenant, value string) (store.Secret, bool) {
		t.Helper()
		var s store.Secret
		var replaced bool
		if err := st.Update(func(tx *store.Tx) (err error) {
			s, replaced, err = box.PutTenant(tx, tenant, "secret://k8s/join", []byte(value))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return s, replaced
	}
	first, replaced := put("acme", "one")
	if replaced || first.Tenant != "acme" || first.CreatedAt.IsZero() || bytes.Contains(first.Sealed, []byte("one")) {
		t.Errorf("first put: %+v replaced %v", first, replaced)
	}
	second, replaced := put("acme", strings.Repeat("2", MaxValue))
	if !replaced || !second.CreatedAt.Equal(first.CreatedAt) {
		t.Errorf("second put: %+v replaced %v", second, replaced)
	}
	err := st.Update(func(tx *store.Tx) error {
		if v, err := box.GetTenant(tx, "acme", "secret://k8s/join"); err != nil || len(v) != MaxValue {
			t.Errorf("acme's secret: %d bytes, %v", len(v), err)
		}
		moved := second
		moved.Tenant = "globex"
		if _, err := tx.PutTenantSecret(moved); err != nil {
			return err
		}
		if _, err := box.GetTenant(tx, "globex", "secret://k8s/join"); proto.CodeOf(err) != proto.Internal {
			t.Errorf("a ciphertext copied to another tenant: %v, want INTERNAL", err)
		}
		if err := tx.DeleteTenantSecret("acme", "secret://k8s/join"); err != nil {
			return err
		}
		if _, err := box.GetTenant(tx, "acme", "secret://k8s/join"); proto.CodeOf(err) != proto.NotFound {
			t.Errorf("after delete: %v, want NOT_FOUND", err)
		}
		if err := tx.DeleteTenantSecret("acme", "secret://k8s/join"); proto.CodeOf(err) != proto.NotFound {
			t.Errorf("delete twice: %v, want NOT_FOUND", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// openTest opens a store in a temporary directory and a box over a fixed key.
func openTest(t *testing.T) (*store.Store, *Box) {
	t.Helper()
	st := storetest.Open(t, store.Options{})
	box, err := New(bytes.Repeat([]byte{7}, keySize))
	if err != nil {
		t.Fatal(err)
	}
	return st, box
}
