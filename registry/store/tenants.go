package store

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

// RootTenant is the tenant made on first start: the platform's own. Its credentials may
// act for any tenant, and its image signers are the platform's.
const RootTenant = "root"

// BuiltinTenant is the read-only tenant that lists the profiles the registry ships. No
// credential belongs to it and nothing is stored under it.
const BuiltinTenant = "builtin"

// Tenant is one isolated owner of profiles, images and nodes. Its id is its name.
type Tenant struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"createdAt"`
}

const bucketTenants = "tenants"

// CheckTenantName refuses a name that cannot be a tenant id.
func CheckTenantName(name string) error {
	if !proto.ValidTenantName(name) {
		return proto.Errorf(proto.InvalidInput, "tenant name %q: use 1 to 63 lower-case letters, digits and hyphens, starting with a letter", name).WithPath("name")
	}
	if name == BuiltinTenant {
		return proto.Errorf(proto.InvalidInput, "tenant name %q is reserved for shipped profiles", name).WithPath("name")
	}
	return nil
}

// CreateTenant stores a new tenant; an existing one is CONFLICT.
func (t *Tx) CreateTenant(name string) (Tenant, error) {
	if err := CheckTenantName(name); err != nil {
		return Tenant{}, err
	}
	var existing Tenant
	if ok, err := t.get(bucketTenants, []byte(name), &existing); err != nil || ok {
		if ok {
			return Tenant{}, proto.Errorf(proto.Conflict, "tenant %q exists already: `tenants list` shows them; name another tenant, or act for this one with --tenant %s", name, name).WithPath("name")
		}
		return Tenant{}, err
	}
	tn := Tenant{ID: name, CreatedAt: t.now}
	return tn, t.put(bucketTenants, []byte(name), tn)
}

// Tenant returns one tenant, NOT_FOUND when it does not exist.
func (t *Tx) Tenant(id string) (Tenant, error) {
	var tn Tenant
	ok, err := t.get(bucketTenants, []byte(id), &tn)
	if err == nil && !ok {
		err = notFound("tenant", id)
	}
	return tn, err
}

// Tenants lists the tenants, one page at a time.
func (t *Tx) Tenants(p Page) ([]Tenant, string, error) {
	var out []Tenant
	next, err := t.scan(bucketTenants, nil, p, func(k, v []byte) (func(), error) {
		var tn Tenant
		if err := decode(bucketTenants, k, v, &tn); err != nil {
			return nil, err
		}
		return func() { out = append(out, tn) }, nil
	})
	return out, next, err
}
