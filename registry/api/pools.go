package api

import (
	"context"
	"slices"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
)

// maxPrewarm bounds a pool's policy.prewarmImages, maxRamdiskExtras its
// policy.ramdiskExtras.
const (
	maxPrewarm       = 64
	maxRamdiskExtras = 8
)

// CreatePoolRequest is the body of pools.create.
type CreatePoolRequest struct {
	TenantID string     `json:"tenantId,omitempty"`
	Name     string     `json:"name"`
	SiteID   string     `json:"siteId"`
	Policy   PoolPolicy `json:"policy"`
}

// PoolRequest names one pool: the body of pools.get.
type PoolRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	Name     string `json:"name"`
}

// UpdatePoolRequest is the body of pools.update. Policy replaces the pool's whole
// policy; PrewarmImages then replaces its pre-warm list and keeps the rest. One of them
// is needed.
type UpdatePoolRequest struct {
	TenantID      string      `json:"tenantId,omitempty"`
	Name          string      `json:"name"`
	Policy        *PoolPolicy `json:"policy,omitempty"`
	PrewarmImages *[]string   `json:"prewarmImages,omitempty"`
}

// ListPoolsRequest is the body of pools.list.
type ListPoolsRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	ListRequest
}

// PoolList is the answer of pools.list.
type PoolList struct {
	Pools      []Pool `json:"pools"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// registerPools adds pools.create, pools.get, pools.update and pools.list. Metal checks
// the hardware profile and the units of a policy, the API its pre-warm refs, the store
// the names, the site and the agent.
func (s *Server) registerPools(svc *metal.Service) {
	Handle(s, "pools.create", ActionPoolsManage, func(_ context.Context, c *Caller, req CreatePoolRequest) (out Pool, err error) {
		policy := req.Policy.stored()
		if err := checkPolicyRefs(&policy, "policy."); err != nil {
			return out, err
		}
		if err := svc.CheckPoolPolicy(policy); err != nil {
			return out, err
		}
		err = inTenant(s.store.Update, c, req.TenantID, func(tx *store.Tx, tenant string) error {
			p, err := tx.CreatePool(store.Pool{Tenant: tenant, Name: req.Name, Site: req.SiteID, Policy: policy})
			out = poolOf(p)
			return err
		})
		return out, err
	})
	Handle(s, "pools.get", ActionPoolsManage, func(_ context.Context, c *Caller, req PoolRequest) (out Pool, err error) {
		err = inTenant(c.view, c, req.TenantID, func(tx *store.Tx, tenant string) error {
			p, err := tx.Pool(tenant, req.Name)
			out = poolOf(p)
			return c.elsewhere(notFoundAt(err, "name"), "name", tenant, poolOwner(tx, req.Name))
		})
		return out, err
	})
	Handle(s, "pools.update", ActionPoolsManage, func(_ context.Context, c *Caller, req UpdatePoolRequest) (out Pool, err error) {
		if req.Policy == nil && req.PrewarmImages == nil {
			return out, proto.Errorf(proto.InvalidInput, "pools.update needs a policy, a pre-warm list or both").WithPath("policy")
		}
		var given *store.PoolPolicy
		if req.Policy != nil {
			policy := req.Policy.stored()
			if err := checkPolicyRefs(&policy, "policy."); err != nil {
				return out, err
			}
			if err := svc.CheckPoolPolicy(policy); err != nil {
				return out, err
			}
			given = &policy
		}
		if req.PrewarmImages != nil {
			if err := checkPrewarm(req.PrewarmImages, "prewarmImages"); err != nil {
				return out, err
			}
		}
		err = inTenant(s.store.Update, c, req.TenantID, func(tx *store.Tx, tenant string) error {
			old, err := tx.Pool(tenant, req.Name)
			if err != nil {
				return c.elsewhere(notFoundAt(err, "name"), "name", tenant, poolOwner(tx, req.Name))
			}
			policy := old.Policy
			if given != nil {
				policy = *given
			}
			if req.PrewarmImages != nil {
				policy.PrewarmImages = *req.PrewarmImages
			}
			p, err := tx.SetPoolPolicy(tenant, req.Name, policy)
			out = poolOf(p)
			return err
		})
		return out, err
	})
	Handle(s, "pools.list", ActionPoolsManage, func(_ context.Context, c *Caller, req ListPoolsRequest) (out PoolList, err error) {
		out.Pools, out.NextCursor, err = tenantPage(c, req.TenantID, req.ListRequest, func(tx *store.Tx, tenant string, page store.Page) ([]Pool, string, error) {
			pools, next, err := tx.Pools(tenant, page)
			return viewsOf(pools, poolOf), next, err
		})
		return out, err
	})
}

// checkPolicyRefs checks the catalog refs of a policy (checkPrewarm, and the ramdisk
// extras alike) at their paths under prefix. Extras on a Secure Boot pool are refused:
// the signed chain's GRUB loads files only from the site's ramdisk directory, so its
// machines would wait at every ramdisk boot (docs/boot.md#secure-boot).
func checkPolicyRefs(p *store.PoolPolicy, prefix string) error {
	if err := checkPrewarm(&p.PrewarmImages, prefix+"prewarmImages"); err != nil {
		return err
	}
	if p.SecureBoot && len(p.RamdiskExtras) > 0 {
		return proto.Errorf(proto.InvalidInput, "extra initrds do not load under Secure Boot (its GRUB loads files from the site's ramdisk directory only), and the pool's machines would wait at each ramdisk boot: leave ramdiskExtras out, or boot the pool without Secure Boot").WithPath(prefix + "ramdiskExtras")
	}
	return checkRefs(p.RamdiskExtras, prefix+"ramdiskExtras", maxRamdiskExtras, "extra initrds")
}

// checkPrewarm refuses a pre-warm list that is too long, repeats a ref or holds one that
// is not name@version or TENANT/name@version, at path; an absent list becomes an empty
// one.
func checkPrewarm(refs *[]string, path string) error {
	if *refs == nil {
		*refs = []string{}
	}
	return checkRefs(*refs, path, maxPrewarm, "pre-warm images")
}

// checkRefs refuses a list of refs longer than limit (of what), with a ref listed twice
// or one that is not name@version or TENANT/name@version, at path.
func checkRefs(refs []string, path string, limit int, what string) error {
	if len(refs) > limit {
		return proto.Errorf(proto.InvalidInput, "a pool has at most %d %s", limit, what).WithPath(path)
	}
	for i, ref := range refs {
		at := string(jsondoc.Path(path).Index(i))
		if _, _, err := image.ParseUseRef(ref); err != nil {
			return proto.AsError(err).WithPath(at)
		}
		if slices.Contains(refs[:i], ref) {
			return proto.Errorf(proto.InvalidInput, "%s is listed twice", ref).WithPath(at)
		}
	}
	return nil
}
