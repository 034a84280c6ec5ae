package console

import (
	"net/http"
	"strconv"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

// knownMACsData is a site's known MACs page: one page of sites.knownMacs, and the limit
// its next link carries on.
type knownMACsData struct {
	api.KnownMACs
	Limit int
}

// knownMACs shows how many MACs a site knows, the bound, and one page of the enrolled
// MACs it leaves out, ?cursor= and ?limit= (100 when absent) as sites.knownMacs takes
// them. The API answers only the root tenant's credentials with compute:sites:manage, so
// a tenant's session gets its FORBIDDEN for any site, existing or not. The sites page
// links it from each site, and lists sites only to a credential sites.list takes: the
// same action and the same root check, so the link is shown only to who may follow it.
func (c *Console) knownMACs(w http.ResponseWriter, r *http.Request, s *session) {
	id, q := r.PathValue("id"), r.URL.Query()
	title := "Known MACs of " + id
	d := knownMACsData{Limit: pageSize}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			c.render(w, r, http.StatusBadRequest, "error", s, view{Title: title, Nav: "sites",
				Err: proto.Errorf(proto.InvalidInput, "limit must be a whole number of MACs a page: follow the page's next link").WithPath("limit")})
			return
		}
		d.Limit = n
	}
	req := api.KnownMACsRequest{SiteID: id, ListRequest: api.ListRequest{Cursor: q.Get("cursor"), Limit: d.Limit}}
	if err := c.call(r.Context(), s, "sites.knownMacs", req, &d.KnownMACs); err != nil {
		c.refused(w, r, s, title, err)
		return
	}
	c.render(w, r, http.StatusOK, "knownmacs", s, view{Title: title, Nav: "sites", Data: &d})
}
