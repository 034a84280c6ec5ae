package api

import (
	"context"
	"slices"
	"strconv"
	"time"

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

// tenantPage reads one page of a tenant's list for the caller: the paging checked, the
// tenant resolved for the caller (another tenant is NOT_FOUND), and list run in one read
// transaction. An empty page is an empty slice, which JSON shows as [], never null.
func tenantPage[T any](st *store.Store, c *Caller, tenantID string, req ListRequest, list func(tx *store.Tx, tenant string, page store.Page) ([]T, string, error)) (items []T, next string, err error) {
	page, err := req.Page()
	if err != nil {
		return nil, "", err
	}
	err = st.View(func(tx *store.Tx) error {
		tenant, err := c.TenantFor(tx, tenantID)
		if err != nil {
			return err
		}
		items, next, err = list(tx, tenant, page)
		return err
	})
	if items == nil {
		items = []T{}
	}
	return items, next, err
}

// TenantList is the answer of tenants.list.
type TenantList struct {
	Tenants    []store.Tenant `json:"tenants"`
	NextCursor string         `json:"nextCursor,omitempty"`
}

// CreateCredentialRequest is the body of credentials.create.
type CreateCredentialRequest struct {
	TenantID string   `json:"tenantId"`
	Actions  []string `json:"actions"`
}

// CreatedCredential is the answer of credentials.create: the only time the bearer
// secret is ever shown.
type CreatedCredential struct {
	ID         string    `json:"id"`
	TenantID   string    `json:"tenantId"`
	Actions    []string  `json:"actions"`
	CreatedAt  time.Time `json:"createdAt"`
	Credential string    `json:"credential"`
}

// registerTenants adds tenants.create, tenants.list and credentials.create.
func (s *Server) registerTenants() {
	Handle(s, "tenants.create", ActionTenantsManage, func(_ context.Context, c *Caller, req CreateTenantRequest) (tn store.Tenant, err error) {
		if c.Tenant != store.RootTenant {
			return tn, proto.Errorf(proto.Forbidden, "only the root tenant's credentials create tenants")
		}
		err = s.store.Update(func(tx *store.Tx) (err error) { tn, err = tx.CreateTenant(req.Name); return err })
		return tn, err
	})
	Handle(s, "tenants.list", ActionTenantsManage, func(_ context.Context, c *Caller, req ListRequest) (out TenantList, err error) {
		if c.Tenant != store.RootTenant {
			return out, proto.Errorf(proto.Forbidden, "only the root tenant's credentials list tenants")
		}
		page, err := req.Page()
		if err != nil {
			return out, err
		}
		err = s.store.View(func(tx *store.Tx) (err error) { out.Tenants, out.NextCursor, err = tx.Tenants(page); return err })
		return out, err
	})
	Handle(s, "credentials.create", ActionCredentialsManage, func(_ context.Context, c *Caller, req CreateCredentialRequest) (out CreatedCredential, err error) {
		if len(req.Actions) == 0 {
			return out, proto.Errorf(proto.InvalidInput, "name at least one action: %v", Actions).WithPath("actions")
		}
		for i, a := range req.Actions {
			if a != ActionAll && !slices.Contains(Actions, a) {
				return out, proto.Errorf(proto.InvalidInput, "unknown action %q: the actions are %v", a, Actions).WithPath(indexPath("actions", i))
			}
			if !c.Can(a) {
				return out, proto.Errorf(proto.Forbidden, "a credential cannot grant %q, which it does not hold itself", a).WithPath(indexPath("actions", i))
			}
		}
		err = s.store.Update(func(tx *store.Tx) error {
			tenant, err := c.TenantFor(tx, req.TenantID)
			if err != nil {
				return err
			}
			cred, bearer, err := tx.CreateCredential(tenant, req.Actions)
			out = CreatedCredential{ID: cred.ID, TenantID: cred.Tenant, Actions: cred.Actions, CreatedAt: cred.CreatedAt, Credential: bearer}
			return err
		})
		return out, err
	})
}

func indexPath(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }
