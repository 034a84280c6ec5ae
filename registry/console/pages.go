package console

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

// pageSize is how many rows a list page asks the API for.
const pageSize = 100

// nodesData is the nodes page: one page of metal.list, filtered as the query asks.
type nodesData struct {
	State, Pool, Cursor string
	States              []string
	// Pools are the tenant's pools for the filter, when the credential may list them.
	Pools []string
	Nodes []api.Node
	// Counts are the nodes of the page by state, in the order of States.
	Counts     []stateCount
	NextCursor string
}

type stateCount struct {
	State string
	N     int
}

// nodes lists the tenant's nodes, by state and pool as the filters ask; find goes to a
// node's page.
func (c *Console) nodes(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	if find := q.Get("find"); find != "" {
		http.Redirect(w, r, "/ui/nodes/"+url.PathEscape(find), http.StatusSeeOther)
		return
	}
	d := nodesData{State: q.Get("state"), Pool: q.Get("pool"), Cursor: q.Get("cursor"), States: api.NodeStates()}
	var pools api.PoolList
	err := c.call(r.Context(), s, "pools.list", api.ListPoolsRequest{ListRequest: api.ListRequest{Limit: pageSize}}, &pools)
	for _, p := range pools.Pools {
		d.Pools = append(d.Pools, p.Name)
	}
	var list api.NodeList
	// The pools only fill the filter, which a failure leaves empty; a refusal for now
	// refuses the page at once, as the nodes' list would be.
	if api.RetryAfter(err) < 0 {
		err = c.call(r.Context(), s, "metal.list", api.ListNodesRequest{State: d.State, Pool: d.Pool, ListRequest: api.ListRequest{Cursor: d.Cursor, Limit: pageSize}}, &list)
	}
	v := view{Title: "Nodes", Nav: "nodes", Data: &d}
	if err != nil {
		if proto.CodeOf(err) == proto.Unauthenticated {
			c.refused(w, r, s, "Nodes", err)
			return
		}
		var status int
		v.Err, status = refusal(w, err)
		c.render(w, r, status, "nodes", s, v)
		return
	}
	d.Nodes, d.NextCursor = list.Nodes, list.NextCursor
	slices.SortStableFunc(d.Nodes, func(a, b api.Node) int {
		return cmp.Compare(slices.Index(d.States, a.State), slices.Index(d.States, b.State))
	})
	for _, st := range d.States {
		n := 0
		for _, node := range d.Nodes {
			if node.State == st {
				n++
			}
		}
		if n > 0 {
			d.Counts = append(d.Counts, stateCount{st, n})
		}
	}
	c.render(w, r, http.StatusOK, "nodes", s, v)
}

// nodeData is a node's page.
type nodeData struct {
	Node api.NodeView
	// Inventory is metal.inventory's sections; InventoryErr its refusal.
	Inventory    []section
	InventoryErr *proto.Error
	Live         *liveData
	Attestations []attestation
	// Actions are the state-changing requests the page offers: those of the console's
	// the node takes now (offered), and the revocation of its agents' certificates
	// unless it is retired. The API decides whether the credential may make each.
	Actions []action
}

// node shows one node: metal.get, metal.inventory, its last workflow and a page of its
// events, the newest or those before ?before=.
func (c *Console) node(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	var d nodeData
	if err := c.call(r.Context(), s, "metal.get", api.NodeKey{NodeID: id}, &d.Node); err != nil {
		c.refused(w, r, s, "Node "+id, err)
		return
	}
	var inv api.NodeInventory
	if err := c.call(r.Context(), s, "metal.inventory", api.NodeKey{NodeID: id}, &inv); err != nil {
		d.InventoryErr = proto.AsError(err)
	}
	d.Inventory = sectionsOf(inv.Sections)
	before, err := strconv.ParseUint(cmp.Or(r.URL.Query().Get("before"), "0"), 10, 64)
	if err != nil {
		c.render(w, r, http.StatusBadRequest, "error", s, view{Title: "Node " + id, Nav: "nodes",
			Err: proto.Errorf(proto.InvalidInput, "before must be an event's seq, a whole number: follow the page's older and newer links").WithPath("before")})
		return
	}
	live, err := c.liveOf(r.Context(), s, d.Node.ID, d.Node.Workflow, before)
	if err != nil {
		c.refused(w, r, s, "Node "+id, err)
		return
	}
	d.Live = live
	if live.Run != nil {
		d.Attestations = attestationsOf(d.Node, *live.Run)
	}
	d.Actions = offered(d.Node)
	c.render(w, r, http.StatusOK, "node", s, view{Title: "Node " + id, Nav: "nodes", Data: &d})
}

// siteData is one site with what its agent reported, what its cache holds and which
// planned images it failed to pull.
type siteData struct {
	Site api.Site
	// Agent is whether the site's agent is connected (sites.inventory).
	Agent    *api.SiteAgent
	Sections []section
	// Locations are the first page of what the site's cache holds (sites.locations),
	// and LocationsCursor the cursor of the next, empty when there is none: `sites
	// locations ID --cursor` lists the rest.
	Locations       []api.ImageLocation
	LocationsCursor string
	// Failed are the images of the site's cache plan its cache failed to pull, with why
	// (sites.cachePlan's failed; `sites cache-plan`'s FAILED AT THE SITE).
	Failed []api.FailedImage
	Err    *proto.Error
}

// sitesData is the sites page: a page of the sites, the requests each offers, and the
// cursor of the next page, empty when there is none.
type sitesData struct {
	Sites      []siteData
	Actions    []action
	NextCursor string
}

// sites lists a page of the sites (the platform's: the API answers only root-tenant
// credentials), those after ?cursor=, with each one's agent, cache, and the images of
// its cache plan it failed to pull.
func (c *Console) sites(w http.ResponseWriter, r *http.Request, s *session) {
	var list api.SiteList
	if err := c.call(r.Context(), s, "sites.list", api.ListRequest{Limit: pageSize, Cursor: r.URL.Query().Get("cursor")}, &list); err != nil {
		c.refused(w, r, s, "Sites", err)
		return
	}
	out := sitesData{Actions: siteRequests.Actions, NextCursor: list.NextCursor}
	for _, site := range list.Sites {
		d := siteData{Site: site}
		var inv api.SiteInventory
		var locs api.SiteLocations
		var plan api.CachePlan
		err := c.call(r.Context(), s, "sites.inventory", api.SiteRequest{SiteID: site.ID}, &inv)
		if err == nil {
			err = c.call(r.Context(), s, "sites.locations", api.SiteLocationsRequest{SiteID: site.ID, ListRequest: api.ListRequest{Limit: pageSize}}, &locs)
		}
		if err == nil {
			err = c.call(r.Context(), s, "sites.cachePlan", api.SiteRequest{SiteID: site.ID}, &plan)
		}
		if err != nil {
			d.Err = proto.AsError(err)
		}
		d.Agent, d.Sections, d.Locations, d.LocationsCursor, d.Failed = inv.Session, sectionsOf(inv.Sections), locs.Locations, locs.NextCursor, plan.Failed
		out.Sites = append(out.Sites, d)
	}
	c.render(w, r, http.StatusOK, "sites", s, view{Title: "Sites", Nav: "sites", Data: &out})
}

// pools lists the tenant's pools.
func (c *Console) pools(w http.ResponseWriter, r *http.Request, s *session) {
	var list api.PoolList
	if err := c.call(r.Context(), s, "pools.list", api.ListPoolsRequest{ListRequest: api.ListRequest{Limit: pageSize, Cursor: r.URL.Query().Get("cursor")}}, &list); err != nil {
		c.refused(w, r, s, "Pools", err)
		return
	}
	c.render(w, r, http.StatusOK, "pools", s, view{Title: "Pools", Nav: "pools", Data: &list})
}

// images lists the catalog's images the credential may see, with their verification.
func (c *Console) images(w http.ResponseWriter, r *http.Request, s *session) {
	var list api.ImageList
	if err := c.call(r.Context(), s, "images.list", api.ListImagesRequest{ListRequest: api.ListRequest{Limit: pageSize, Cursor: r.URL.Query().Get("cursor")}}, &list); err != nil {
		c.refused(w, r, s, "Images", err)
		return
	}
	c.render(w, r, http.StatusOK, "images", s, view{Title: "Images", Nav: "images", Data: &list})
}
