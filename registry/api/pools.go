package api

import (
	"context"
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/store"
)

// maxPrewarm bounds a pool's policy.prewarmImages.
const maxPrewarm = 64

// CreatePoolRequest is the body of pools.create.
type CreatePoolRequest struct {
	TenantID string           `json:"tenantId,omitempty"`
	Name     string           `json:"name"`
	SiteID   string           `json:"siteId"`
	Policy   store.PoolPolicy `json:"policy"`
}

// PoolRequest names one pool: the body of pools.get.
type PoolRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	Name     string `json:"name"`
}

// UpdatePoolRequest is the body of pools.update: the pool's new policy.
type UpdatePoolRequest struct {
	TenantID string           `json:"tenantId,omitempty"`
	Name     string           `json:"name"`
	Policy   store.PoolPolicy `json:"policy"`
}

// ListPoolsRequest is the body of pools.list.
type ListPoolsRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	ListRequest
}

// PoolList is the answer of pools.list.
type PoolList struct {
	Pools      []store.Pool `json:"pools"`
	NextCursor string       `json:"nextCursor,omitempty"`
}

// registerPools adds pools.create, pools.get, pools.update and pools.list.
func (s *Server) registerPools() {
	Handle(s, "pools.create", ActionPoolsManage, func(_ context.Context, c *Caller, req CreatePoolRequest) (p store.Pool, err error) {
		if err := checkPolicy(&req.Policy); err != nil {
			return p, err
		}
		err = s.store.Update(func(tx *store.Tx) error {
			tenant, err := c.TenantFor(tx, req.TenantID)
			if err != nil {
				return err
			}
			p, err = tx.CreatePool(store.Pool{Tenant: tenant, Name: req.Name, Site: req.SiteID, Policy: req.Policy})
			return err
		})
		return p, err
	})
	Handle(s, "pools.get", ActionPoolsManage, func(_ context.Context, c *Caller, req PoolRequest) (p store.Pool, err error) {
		err = s.store.View(func(tx *store.Tx) error {
			tenant, err := c.TenantFor(tx, req.TenantID)
			if err != nil {
				return err
			}
			p, err = tx.Pool(tenant, req.Name)
			return err
		})
		return p, err
	})
	Handle(s, "pools.update", ActionPoolsManage, func(_ context.Context, c *Caller, req UpdatePoolRequest) (p store.Pool, err error) {
		if err := checkPolicy(&req.Policy); err != nil {
			return p, err
		}
		err = s.store.Update(func(tx *store.Tx) error {
			tenant, err := c.TenantFor(tx, req.TenantID)
			if err != nil {
				return err
			}
			p, err = tx.SetPoolPolicy(tenant, req.Name, req.Policy)
			return err
		})
		return p, err
	})
	Handle(s, "pools.list", ActionPoolsManage, func(_ context.Context, c *Caller, req ListPoolsRequest) (out PoolList, err error) {
		page, err := req.Page()
		if err != nil {
			return out, err
		}
		err = s.store.View(func(tx *store.Tx) error {
			tenant, err := c.TenantFor(tx, req.TenantID)
			if err != nil {
				return err
			}
			out.Pools, out.NextCursor, err = tx.Pools(tenant, page)
			return err
		})
		if out.Pools == nil {
			out.Pools = []store.Pool{}
		}
		return out, err
	})
}

// checkPolicy refuses a policy whose pre-warm list is too long, repeats a ref or holds
// one that is not name@version; an absent list becomes an empty one.
func checkPolicy(p *store.PoolPolicy) error {
	if p.PrewarmImages == nil {
		p.PrewarmImages = []string{}
	}
	if len(p.PrewarmImages) > maxPrewarm {
		return proto.Errorf(proto.InvalidInput, "a pool pre-warms at most %d images", maxPrewarm).WithPath("policy.prewarmImages")
	}
	for i, ref := range p.PrewarmImages {
		path := indexPath("policy.prewarmImages", i)
		if _, err := image.ParseRef(ref); err != nil {
			return proto.AsError(err).WithPath(path)
		}
		if slices.Contains(p.PrewarmImages[:i], ref) {
			return proto.Errorf(proto.InvalidInput, "%s is listed twice", ref).WithPath(path)
		}
	}
	return nil
}
