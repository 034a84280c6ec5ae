package store

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

// Secret is one sealed secret: a node's (its user data) or a tenant's (a secret the
// tenant put for its nodes, such as a Kubernetes bootstrap token). The store holds only
// its ciphertext: sealing and opening happen before and after the store (registry/secret).
type Secret struct {
	// Ref names the secret; it is what a workflow or a unit passes around instead of the
	// secret. A node's secret has a ref the registry made; a tenant's is the name the
	// tenant put it under (secret://k8s/prod-join), unique within the tenant.
	Ref string `json:"ref"`
	// Purpose says what the secret is for: "userdata" (a node has at most one secret of
	// each purpose), or PurposeTenant.
	Purpose string `json:"purpose"`
	// NodeID is the node the secret belongs to; empty for a tenant's secret.
	NodeID string `json:"nodeId,omitempty"`
	// Tenant is the tenant a tenant's secret belongs to; empty for a node's.
	Tenant string `json:"tenantId,omitempty"`
	// Sealed is the ciphertext.
	Sealed    []byte    `json:"sealed"`
	CreatedAt time.Time `json:"createdAt"`
	// UpdatedAt is when a tenant's secret got its current value.
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// PurposeTenant is the purpose of a tenant's secrets.
const PurposeTenant = "tenant"

const (
	bucketSecrets = "secrets"
	// bucketNodeSecrets indexes the current secret of each purpose and node: purpose,
	// node id -> ref.
	bucketNodeSecrets = "secrets_by_node"
	// bucketTenantSecrets holds the tenants' secrets: tenant, ref -> secret.
	bucketTenantSecrets = "tenant_secrets"
)

func nodeSecretKey(purpose, nodeID string) []byte { return []byte(purpose + "\x00" + nodeID) }

// PutSecret stores a new secret and drops the node's earlier secret of the same
// purpose, so a node never has more than one (a re-rendered user data replaces the
// last). The ref must be new, the purpose and node set.
func (t *Tx) PutSecret(s Secret) error {
	if s.Ref == "" || s.Purpose == "" || s.NodeID == "" {
		return proto.Errorf(proto.Internal, "a secret needs a ref, a purpose and a node")
	}
	if t.getRaw(bucketSecrets, []byte(s.Ref)) != nil {
		return proto.Errorf(proto.Conflict, "secret %s exists already", s.Ref)
	}
	idx := nodeSecretKey(s.Purpose, s.NodeID)
	if old := t.getRaw(bucketNodeSecrets, idx); old != nil {
		if err := t.del(bucketSecrets, old); err != nil {
			return err
		}
	}
	s.CreatedAt = t.now
	if err := t.put(bucketSecrets, []byte(s.Ref), s); err != nil {
		return err
	}
	return t.putRaw(bucketNodeSecrets, idx, []byte(s.Ref))
}

// Secret returns the secret ref names, false when there is none (never was, or it was
// replaced).
func (t *Tx) Secret(ref string) (Secret, bool, error) {
	var s Secret
	ok, err := t.get(bucketSecrets, []byte(ref), &s)
	return s, ok, err
}

func tenantSecretKey(tenant, ref string) []byte { return []byte(tenant + "\x00" + ref) }

// PutTenantSecret stores the tenant's secret s.Ref, replacing the value it had (its
// creation time stays), and reports whether it replaced one. A new secret past the
// tenant's bound (TenantBounds.Secrets) is INVALID_STATE, reason quota, at ref.
func (t *Tx) PutTenantSecret(s Secret) (replaced bool, err error) {
	if s.Tenant == "" || s.Ref == "" || s.NodeID != "" || len(s.Sealed) == 0 {
		return false, proto.Errorf(proto.Internal, "a tenant's secret needs a tenant, a ref and a ciphertext, and no node")
	}
	key := tenantSecretKey(s.Tenant, s.Ref)
	var old Secret
	if replaced, err = t.get(bucketTenantSecrets, key, &old); err != nil {
		return false, err
	}
	s.Purpose, s.CreatedAt, s.UpdatedAt = PurposeTenant, t.now, t.now
	if replaced {
		s.CreatedAt = old.CreatedAt
	} else if err := t.admit(countSecrets, s.Tenant, "ref"); err != nil {
		return false, err
	}
	return replaced, t.put(bucketTenantSecrets, key, s)
}

// TenantSecret returns the tenant's secret ref, false when the tenant has none of that
// name.
func (t *Tx) TenantSecret(tenant, ref string) (Secret, bool, error) {
	var s Secret
	ok, err := t.get(bucketTenantSecrets, tenantSecretKey(tenant, ref), &s)
	return s, ok, err
}

// TenantSecrets returns a page of the tenant's secrets in ref order.
func (t *Tx) TenantSecrets(tenant string, pg Page) ([]Secret, string, error) {
	var out []Secret
	next, err := t.scan(bucketTenantSecrets, []byte(tenant+"\x00"), pg, func(k, v []byte) (func(), error) {
		var s Secret
		if err := decode(bucketTenantSecrets, k, v, &s); err != nil {
			return nil, err
		}
		return func() { out = append(out, s) }, nil
	})
	return out, next, err
}

// DeleteTenantSecret removes the tenant's secret ref; NOT_FOUND when there is none.
func (t *Tx) DeleteTenantSecret(tenant, ref string) error {
	key := tenantSecretKey(tenant, ref)
	if t.getRaw(bucketTenantSecrets, key) == nil {
		return notFound("secret", ref).WithPath("ref")
	}
	if err := t.release(countSecrets, tenant); err != nil {
		return err
	}
	return t.del(bucketTenantSecrets, key)
}
