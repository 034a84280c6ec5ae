package api

import (
	"context"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/site"
	"github.com/better-compute/better-compute/registry/store"
)

// CreateSiteRequest is the body of sites.create.
type CreateSiteRequest struct {
	Name string `json:"name"`
	// BMCNetworks are the CIDRs the BMC addresses of the site's nodes must be in.
	BMCNetworks []string `json:"bmcNetworks,omitempty"`
	// ImageSources are the host patterns the site's caches may pull images from.
	ImageSources []string `json:"imageSources,omitempty"`
}

// UpdateSiteRequest is the body of sites.update: what it gives replaces the site's, and
// what it leaves out stays.
type UpdateSiteRequest struct {
	SiteID string `json:"siteId"`
	// BMCNetworks replaces the site's BMC networks; [] leaves none.
	BMCNetworks *[]string `json:"bmcNetworks,omitempty"`
	// ImageSources, when given, replace the site's image sources ([] allows none).
	ImageSources *[]string `json:"imageSources,omitempty"`
}

// SiteRequest names one site: the body of sites.cachePlan.
type SiteRequest struct {
	SiteID string `json:"siteId"`
}

// KnownMACsRequest is the body of sites.knownMacs: one page of the site's left-out MACs.
type KnownMACsRequest struct {
	SiteID string `json:"siteId"`
	ListRequest
}

// SiteList is the answer of sites.list.
type SiteList struct {
	Sites      []Site `json:"sites"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// SiteLocationsRequest is the body of sites.locations: one page of the images the site's
// caches hold.
type SiteLocationsRequest struct {
	SiteID string `json:"siteId"`
	ListRequest
}

// SiteLocations is the answer of sites.locations: one page of the images the site's
// caches hold, by digest, then source, then tenant and image id
// (store.Tx.ImageLocationsPage).
type SiteLocations struct {
	Locations  []ImageLocation `json:"locations"`
	NextCursor string          `json:"nextCursor,omitempty"`
}

// SiteInventory is the answer of sites.inventory: what the site's agent last reported,
// section by section (site, images, bootEntries, discoveries).
type SiteInventory struct {
	Agent string `json:"agent"`
	// Session is whether the agent is connected.
	Session  *SiteAgent         `json:"session"`
	Sections []InventorySection `json:"sections"`
}

// registerSites adds sites.create, sites.update, sites.list, sites.cachePlan,
// sites.knownMacs, sites.locations and sites.inventory. Sites are the
// platform's: only the root tenant's credentials reach them.
func (s *Server) registerSites() {
	Handle(s, "sites.create", ActionSitesManage, func(_ context.Context, c *Caller, req CreateSiteRequest) (out Site, err error) {
		var site store.Site
		if err := sitesRootOnly(c); err != nil {
			return out, err
		}
		err = c.update(func(tx *store.Tx) (err error) {
			if site, err = tx.CreateSite(req.Name); err != nil {
				return err
			}
			if req.BMCNetworks != nil {
				if site, err = tx.SetSiteBMCNetworks(site.ID, req.BMCNetworks); err != nil {
					return err
				}
			}
			if req.ImageSources != nil {
				site, err = tx.SetSiteImageSources(site.ID, req.ImageSources)
			}
			return err
		})
		return siteOf(site), err
	})
	Handle(s, "sites.update", ActionSitesManage, func(_ context.Context, c *Caller, req UpdateSiteRequest) (out Site, err error) {
		var site store.Site
		if err := sitesRootOnly(c); err != nil {
			return out, err
		}
		if req.BMCNetworks == nil && req.ImageSources == nil {
			return out, proto.Errorf(proto.InvalidInput, "sites.update needs what to change: give bmcNetworks (--bmc-networks), imageSources (--image-sources) or both")
		}
		err = c.update(func(tx *store.Tx) (err error) {
			if site, err = requestedSite(tx, req.SiteID); err != nil {
				return err
			}
			if req.BMCNetworks != nil {
				if site, err = tx.SetSiteBMCNetworks(site.ID, *req.BMCNetworks); err != nil {
					return err
				}
			}
			if req.ImageSources != nil {
				site, err = tx.SetSiteImageSources(site.ID, *req.ImageSources)
			}
			return err
		})
		return siteOf(site), err
	})
	Handle(s, "sites.list", ActionSitesManage, func(_ context.Context, c *Caller, req ListRequest) (out SiteList, err error) {
		if err := sitesRootOnly(c); err != nil {
			return out, err
		}
		out.Sites, out.NextCursor, err = listPage(c, req, func(tx *store.Tx, page store.Page) ([]Site, string, error) {
			sites, next, err := tx.Sites(page)
			if err != nil {
				return nil, "", err
			}
			views := viewsOf(sites, siteOf)
			for i := range views {
				if views[i].Agent, err = siteAgentOf(tx, views[i].ID); err != nil {
					return nil, "", err
				}
			}
			return views, next, nil
		})
		return out, err
	})
	Handle(s, "sites.cachePlan", ActionSitesManage, func(_ context.Context, c *Caller, req SiteRequest) (out CachePlan, err error) {
		var plan image.CachePlan
		var failed []image.FailedImage
		if err := sitesRootOnly(c); err != nil {
			return out, err
		}
		err = c.view(func(tx *store.Tx) (err error) {
			plan, err = image.PlanSiteCache(tx, req.SiteID, image.Allowlist{})
			if proto.CodeOf(err) == proto.NotFound {
				return proto.AsError(err).WithPath("siteId")
			}
			if err != nil {
				return err
			}
			failed, err = image.FailedAt(tx, req.SiteID, plan.CacheImages)
			return err
		})
		return cachePlanOf(plan, failed), err
	})
	Handle(s, "sites.knownMacs", ActionSitesManage, func(_ context.Context, c *Caller, req KnownMACsRequest) (out KnownMACs, err error) {
		if err := sitesRootOnly(c); err != nil {
			return out, err
		}
		out.Site, out.Max = req.SiteID, proto.MaxKnownMACs
		out.LeftOut, out.NextCursor, err = listPage(c, req.ListRequest, func(tx *store.Tx, page store.Page) ([]LeftOutMAC, string, error) {
			if _, err := requestedSite(tx, req.SiteID); err != nil {
				return nil, "", err
			}
			known, err := site.KnownMACs(tx, req.SiteID)
			if err != nil {
				return nil, "", err
			}
			out.Known, out.LeftOutCount = len(known.MACs), len(known.LeftOut)
			left, next, err := store.PageOf(known.LeftOut, func(l site.LeftOut) []byte { return []byte(l.MAC + "\x00" + l.Node) }, page)
			return viewsOf(left, leftOutOf), next, err
		})
		return out, err
	})
	Handle(s, "sites.locations", ActionSitesManage, func(_ context.Context, c *Caller, req SiteLocationsRequest) (out SiteLocations, err error) {
		if err := sitesRootOnly(c); err != nil {
			return out, err
		}
		out.Locations, out.NextCursor, err = listPage(c, req.ListRequest, func(tx *store.Tx, page store.Page) ([]ImageLocation, string, error) {
			if _, err := requestedSite(tx, req.SiteID); err != nil {
				return nil, "", err
			}
			locs, next, err := tx.ImageLocationsPage(req.SiteID, page)
			return viewsOf(locs, locationOf), next, err
		})
		return out, err
	})
	Handle(s, "sites.inventory", ActionSitesManage, func(_ context.Context, c *Caller, req SiteRequest) (out SiteInventory, err error) {
		if err := sitesRootOnly(c); err != nil {
			return out, err
		}
		out.Agent = site.Agent(req.SiteID)
		err = c.view(func(tx *store.Tx) (err error) {
			if _, err := requestedSite(tx, req.SiteID); err != nil {
				return err
			}
			if out.Session, err = siteAgentOf(tx, req.SiteID); err != nil {
				return err
			}
			sections, err := tx.Inventory(out.Agent)
			out.Sections = viewsOf(sections, sectionOf)
			return err
		})
		return out, err
	})
}

// sitesRootOnly is FORBIDDEN for a caller outside the root tenant: sites are the
// platform's.
func sitesRootOnly(c *Caller) error {
	if c.Tenant != store.RootTenant {
		return proto.Errorf(proto.Forbidden, "sites are the platform's: only the root tenant's credentials manage them")
	}
	return nil
}

// requestedSite reads the site a request names by siteId; an unknown one is NOT_FOUND
// at siteId.
func requestedSite(tx *store.Tx, id string) (store.Site, error) {
	site, err := tx.Site(id)
	if err != nil {
		return site, proto.AsError(err).WithPath("siteId")
	}
	return site, nil
}
