package secret

import (
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
	"github.com/better-compute/better-compute/registry/store"
)

// MaxValue bounds a tenant's secret: a bootstrap token or a credential, not a file.
const MaxValue = 64 << 10

// CheckRef refuses a ref that is not a secret reference (the rule of a unit's tokenRef)
// as INVALID_INPUT at ref.
func CheckRef(ref string) error {
	if !hostunit.IsSecretRef(ref) {
		return proto.Errorf(proto.InvalidInput, "ref %q %s", ref, hostunit.SecretRefRule).WithPath("ref")
	}
	return nil
}

// CheckTenantSecret refuses what CheckRef refuses, and a value that is empty or larger
// than MaxValue, as INVALID_INPUT at value.
func CheckTenantSecret(ref string, value []byte) error {
	if err := CheckRef(ref); err != nil {
		return err
	}
	if len(value) == 0 {
		return proto.Errorf(proto.InvalidInput, "the secret %s is empty: give its value", ref).WithPath("value")
	}
	if len(value) > MaxValue {
		return proto.Errorf(proto.InvalidInput, "the secret %s is %d bytes; a secret is at most %d", ref, len(value), MaxValue).WithPath("value")
	}
	return nil
}

// PutTenant seals value as the tenant's secret ref, replacing its earlier value, and
// returns the stored record (its ciphertext only).
func (b *Box) PutTenant(tx *store.Tx, tenant, ref string, value []byte) (s store.Secret, replaced bool, err error) {
	if err := CheckTenantSecret(ref, value); err != nil {
		return s, false, err
	}
	s = store.Secret{Ref: ref, Purpose: store.PurposeTenant, Tenant: tenant}
	b.seal(&s, value)
	if replaced, err = tx.PutTenantSecret(s); err != nil {
		return s, false, err
	}
	s, _, err = tx.TenantSecret(tenant, ref)
	return s, replaced, err
}

// GetTenant returns the tenant's secret ref and its value; NOT_FOUND when the tenant has
// none of that name. It opens the ciphertext for the tenant and ref asked for, so a record
// copied under another tenant's key does not open.
func (b *Box) GetTenant(tx *store.Tx, tenant, ref string) ([]byte, error) {
	s, ok, err := tx.TenantSecret(tenant, ref)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, proto.Errorf(proto.NotFound, "tenant %s has no secret %s: put it with `better-compute secrets put`", tenant, ref)
	}
	s.Tenant, s.Ref, s.Purpose, s.NodeID = tenant, ref, store.PurposeTenant, ""
	return b.open(s)
}

// ForAgent returns the secret ref to the agent of node in role, as the agent endpoint
// asks on the agent's behalf. Only an agent of role node gets a secret, only one its own
// NodeSpec's host units name (a k8s-join's tokenRef), and only from its own tenant's
// secrets, while its identity is not revoked; anything else is FORBIDDEN before any secret is looked up, so the answer says
// nothing of other tenants' secrets. A referenced secret the tenant has not put is
// NOT_FOUND. A ref that is no secret reference, which no NodeSpec names, is INVALID_INPUT
// at ref (CheckRef), quoted cut short: the agent sends whatever ref it likes.
func (b *Box) ForAgent(tx *store.Tx, node string, role proto.Role, ref string) ([]byte, error) {
	if err := CheckRef(ref); err != nil {
		return nil, err
	}
	if role != proto.RoleNode {
		return nil, proto.Errorf(proto.Forbidden, "secrets go only to node agents, not to the %s agent of %s", role, node)
	}
	spec, err := tx.NodeSpec(node)
	if proto.CodeOf(err) == proto.NotFound {
		return nil, proto.Errorf(proto.Forbidden, "node %s has no NodeSpec, so it references no secret", node)
	}
	if err != nil {
		return nil, err
	}
	if !slices.Contains(hostunit.SecretRefs(spec.Host), ref) {
		return nil, proto.Errorf(proto.Forbidden, "the NodeSpec of node %s (generation %d) references no secret %q: a node gets only the secrets its host units name", node, spec.Generation, ref)
	}
	n, err := tx.Node(node)
	if proto.CodeOf(err) == proto.NotFound {
		return nil, proto.Errorf(proto.Forbidden, "node %s is not enrolled, so it belongs to no tenant", node)
	}
	if err != nil {
		return nil, err
	}
	if err := n.RevokedIdentity(); err != nil {
		return nil, err
	}
	return b.GetTenant(tx, n.Tenant, ref)
}
