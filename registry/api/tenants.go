package api

import (
	"context"
	"slices"
	"time"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// CreateTenantRequest is the body of tenants.create.
type CreateTenantRequest struct {
	Name string `json:"name"`
}

// ListRequest is the paging part every list method takes.
type ListRequest struct {
	Cursor string `json:"cursor,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// Page turns the request into a store page, refusing a limit out of range.
func (r ListRequest) Page() (store.Page, error) {
	if r.Limit < 0 || r.Limit > store.MaxPage {
		return store.Page{}, proto.Errorf(proto.InvalidInput, "limit must be 1 to %d", store.MaxPage).WithPath("limit")
	}
	return store.Page{Cursor: r.Cursor, Limit: r.Limit}, nil
}

// inTenant runs fn in the transaction txn opens (the store's View or Update) with the
// caller's tenant for tenantID resolved in it: another tenant is NOT_FOUND, and fn does
// not run.
func inTenant(txn func(func(*store.Tx) error) error, c *Caller, tenantID string, fn func(tx *store.Tx, tenant string) error) error {
	return txn(func(tx *store.Tx) error {
		tenant, err := c.TenantFor(tx, tenantID)
		if err != nil {
			return err
		}
		return fn(tx, tenant)
	})
}

// listPage reads one page of a list: the paging checked, and list run in one read
// transaction. An empty page is an empty slice, which JSON shows as [], never null.
func listPage[T any](c *Caller, req ListRequest, list func(tx *store.Tx, page store.Page) ([]T, string, error)) (items []T, next string, err error) {
	page, err := req.Page()
	if err != nil {
		return nil, "", err
	}
	err = c.view(func(tx *store.Tx) error {
		items, next, err = list(tx, page)
		return err
	})
	if items == nil {
		items = []T{}
	}
	return items, next, err
}

// tenantPage reads one page of a tenant's list for the caller as listPage does, the
// tenant resolved for the caller in the same transaction (another tenant is NOT_FOUND).
func tenantPage[T any](c *Caller, tenantID string, req ListRequest, list func(tx *store.Tx, tenant string, page store.Page) ([]T, string, error)) ([]T, string, error) {
	return listPage(c, req, func(tx *store.Tx, page store.Page) ([]T, string, error) {
		tenant, err := c.TenantFor(tx, tenantID)
		if err != nil {
			return nil, "", err
		}
		return list(tx, tenant, page)
	})
}

// TenantList is the answer of tenants.list.
type TenantList struct {
	Tenants    []Tenant `json:"tenants"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

// CreateCredentialRequest is the body of credentials.create. ExpiresAt, when set, must
// be in the future; a caller whose own credential expires makes only credentials that
// expire no later (unset, the new one expires with it).
type CreateCredentialRequest struct {
	TenantID  string    `json:"tenantId"`
	Actions   []string  `json:"actions"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// Credential is a credential as the API shows it: never its secret, nor its hash.
type Credential struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenantId"`
	Actions   []string  `json:"actions"`
	CreatedAt time.Time `json:"createdAt"`
	// ExpiresAt is when it stops working; absent for never.
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	// RevokedAt is when it was revoked; absent while it is not.
	RevokedAt time.Time `json:"revokedAt,omitzero"`
}

func credentialView(c store.Credential) Credential {
	return Credential{ID: c.ID, TenantID: c.Tenant, Actions: c.Actions, CreatedAt: c.CreatedAt, ExpiresAt: c.ExpiresAt, RevokedAt: c.RevokedAt}
}

// CreatedCredential is the answer of credentials.create: the only time the bearer
// secret is ever shown.
type CreatedCredential struct {
	Credential
	// Secret is the bearer secret.
	Secret string `json:"credential"`
}

// ListCredentialsRequest is the body of credentials.list.
type ListCredentialsRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	ListRequest
}

// CredentialList is the answer of credentials.list.
type CredentialList struct {
	Credentials []Credential `json:"credentials"`
	NextCursor  string       `json:"nextCursor,omitempty"`
}

// RevokeCredentialRequest is the body of credentials.revoke.
type RevokeCredentialRequest struct {
	ID string `json:"id"`
}

// registerTenants adds the tenants.* and credentials.* methods. credentials.whoami needs
// no action: any credential may read its own record (tenant, actions, expiry).
func (s *Server) registerTenants() {
	Handle(s, "tenants.create", ActionTenantsManage, func(_ context.Context, c *Caller, req CreateTenantRequest) (out Tenant, err error) {
		if c.Tenant != store.RootTenant {
			return out, proto.Errorf(proto.Forbidden, "only the root tenant's credentials create tenants")
		}
		err = c.update(func(tx *store.Tx) error {
			tn, err := tx.CreateTenant(req.Name)
			out = tenantOf(tn)
			return err
		})
		return out, err
	})
	Handle(s, "tenants.list", ActionTenantsManage, func(_ context.Context, c *Caller, req ListRequest) (out TenantList, err error) {
		if c.Tenant != store.RootTenant {
			return out, proto.Errorf(proto.Forbidden, "only the root tenant's credentials list tenants")
		}
		out.Tenants, out.NextCursor, err = listPage(c, req, func(tx *store.Tx, page store.Page) ([]Tenant, string, error) {
			tenants, next, err := tx.Tenants(page)
			return viewsOf(tenants, tenantOf), next, err
		})
		return out, err
	})
	Handle(s, "credentials.create", ActionCredentialsManage, func(_ context.Context, c *Caller, req CreateCredentialRequest) (out CreatedCredential, err error) {
		if err := checkGrant(c, req.Actions); err != nil {
			return out, err
		}
		err = inTenant(c.update, c, req.TenantID, func(tx *store.Tx, tenant string) error {
			expires, err := grantExpiry(tx, c, req.ExpiresAt)
			if err != nil {
				return err
			}
			cred, bearer, err := tx.CreateCredential(tenant, req.Actions, expires)
			out = CreatedCredential{Credential: credentialView(cred), Secret: bearer}
			return err
		})
		return out, err
	})
	Handle(s, "credentials.list", ActionCredentialsManage, func(_ context.Context, c *Caller, req ListCredentialsRequest) (out CredentialList, err error) {
		out.Credentials, out.NextCursor, err = tenantPage(c, req.TenantID, req.ListRequest, func(tx *store.Tx, tenant string, page store.Page) ([]Credential, string, error) {
			creds, next, err := tx.Credentials(tenant, page)
			views := make([]Credential, len(creds))
			for i, cred := range creds {
				views[i] = credentialView(cred)
			}
			return views, next, err
		})
		return out, err
	})
	s.Register("credentials.whoami", Method{Call: typed(func(_ context.Context, c *Caller, _ struct{}) (out Credential, err error) {
		err = c.view(func(tx *store.Tx) error {
			cred, err := tx.Credential(c.CredentialID)
			out = credentialView(cred)
			return err
		})
		return out, err
	})})
	Handle(s, "credentials.revoke", ActionCredentialsManage, func(_ context.Context, c *Caller, req RevokeCredentialRequest) (out Credential, err error) {
		err = c.update(func(tx *store.Tx) error {
			cred, err := tx.Credential(req.ID)
			if proto.CodeOf(err) == proto.NotFound || (err == nil && c.Tenant != store.RootTenant && cred.Tenant != c.Tenant) {
				// Another tenant's credential does not exist for the caller.
				return proto.Errorf(proto.NotFound, "credential %.40q not found: %s", req.ID, store.CredentialsListed).WithPath("id")
			}
			if err != nil {
				return err
			}
			if cred.ID == c.CredentialID {
				return proto.Errorf(proto.Forbidden, "credential %s is the one this request authenticates with: revoke it with another credential", cred.ID).WithPath("id")
			}
			if err := checkNotLastAdmin(tx, cred); err != nil {
				return err
			}
			cred, err = tx.RevokeCredential(cred.ID)
			out = credentialView(cred)
			return err
		})
		return out, err
	})
}

// checkGrant refuses actions a new credential may not carry: none, an unknown one, `*`
// (only the admin credential holds it: made at the first start, replaced only on the
// host by credentials.rotateAdmin), or one the caller does not hold itself.
func checkGrant(c *Caller, actions []string) error {
	if len(actions) == 0 {
		return proto.Errorf(proto.InvalidInput, "name at least one action: %v", Actions).WithPath("actions")
	}
	for i, a := range actions {
		at := string(jsondoc.Path("actions").Index(i))
		switch {
		case a == ActionAll:
			return proto.Errorf(proto.InvalidInput, "%q (every action) is held only by the admin credential (admin.conf on the registry's host) and is never granted: name the actions the credential needs, from %v", a, Actions).WithPath(at)
		case !slices.Contains(Actions, a):
			return proto.Errorf(proto.InvalidInput, "unknown action %.64q: the actions are %v", a, Actions).WithPath(at)
		case !c.Can(a):
			return proto.Errorf(proto.Forbidden, "a credential cannot grant %q, which it does not hold itself", a).WithPath(at)
		}
	}
	return nil
}

// grantExpiry is when a credential the caller makes expires, asked for requested (zero:
// none asked). A caller whose own credential expires cannot make one that outlives it:
// a later expiry is FORBIDDEN, none asked is its own.
func grantExpiry(tx *store.Tx, c *Caller, requested time.Time) (time.Time, error) {
	if c.Host {
		return requested, nil
	}
	own, err := tx.Credential(c.CredentialID)
	if err != nil || own.ExpiresAt.IsZero() {
		return requested, err
	}
	switch {
	case requested.IsZero():
		return own.ExpiresAt, nil
	case requested.After(own.ExpiresAt):
		return time.Time{}, proto.Errorf(proto.Forbidden, "a credential cannot make one that outlives it: this one expires at %s; ask for that time or an earlier one",
			own.ExpiresAt.UTC().Format(time.RFC3339)).WithPath("expiresAt")
	}
	return requested, nil
}

// checkNotLastAdmin refuses to revoke the root tenant's last usable credential holding
// `*` (the admin credential): nobody could then manage tenants, and `*` is never granted
// over the network; only the host replaces it (credentials.rotateAdmin).
func checkNotLastAdmin(tx *store.Tx, cred store.Credential) error {
	if cred.Tenant != store.RootTenant || !slices.Contains(cred.Actions, ActionAll) || !cred.Usable(tx.Now()) {
		return nil
	}
	holders, err := tx.UsableHolding(store.RootTenant, ActionAll)
	if err != nil || len(holders) > 1 {
		return err
	}
	return proto.Errorf(proto.Forbidden, "credential %s is the platform's last one holding %q (the admin credential): revoking it would leave nobody able to manage tenants, so it cannot be revoked; to replace it, run `better-compute credentials rotate-admin --data-dir DIR` on the registry's host", cred.ID, ActionAll).WithPath("id")
}
