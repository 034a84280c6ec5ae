package console

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
)

// The state-changing requests the console offers, each asked for confirmation.
const (
	actionDeploy  = "deploy"
	actionRelease = "release"
	actionCancel  = "cancel"
	actionRevoke  = "revoke-certificates"
)

// action is a request a page offers on one of its objects: its path under the object's,
// what its link and confirmation say, and the API call its confirmed form r makes on
// object id.
type action struct {
	Name, Label string
	request     func(r *http.Request, id string) (method string, req, resp any)
}

// target is a kind of object the console's requests change: where its pages are, what
// a confirmation and the log call one, the requests it offers, and the page a request
// the API took goes back to.
type target struct {
	// Path is the objects' pages' under /ui/, the navigation's section too.
	Path, Noun string
	Actions    []action
	back       func(id string) string
}

// nodeRequests are a node's: deploy, release, cancel and revoke its agents' certificates,
// back to the node's page, which follows a workflow the request started.
var nodeRequests = &target{Path: "nodes", Noun: "node", Actions: []action{
	{actionDeploy, "deploy", func(r *http.Request, id string) (string, any, any) {
		return "metal.deploy", api.DeployRequest{NodeID: id, ProfileID: r.PostFormValue("profile")}, &api.DeployStarted{}
	}},
	{actionRelease, "release", func(r *http.Request, id string) (string, any, any) {
		return "metal.release", api.TransitionRequest{NodeID: id, Wipe: r.PostFormValue("wipe")}, &api.TransitionStarted{}
	}},
	{actionCancel, "cancel", func(r *http.Request, id string) (string, any, any) {
		return "metal.cancel", api.TransitionRequest{NodeID: id}, &api.TransitionStarted{}
	}},
	{actionRevoke, "revoke agent certificates", func(r *http.Request, id string) (string, any, any) {
		return "metal.revokeCertificates", api.RevokeNodeCertificatesRequest{NodeID: id, Reason: r.PostFormValue("reason")}, &api.CertificatesRevoked{}
	}},
}, back: func(id string) string { return "/ui/nodes/" + url.PathEscape(id) }}

// offered are the node requests the console offers on node's page: those the node
// takes now (metal.get's requests, the lifecycle table's), and the revocation of its
// agents' certificates until its identity is revoked for good (a retire's
// metal.revokeIdentity step), when metal.revokeCertificates refuses it. A request not
// offered is still refused by the API if posted.
func offered(node api.NodeView) []action {
	var out []action
	for _, a := range nodeRequests.Actions {
		if a.Name == actionRevoke && node.IdentityRevokedAt.IsZero() || slices.Contains(node.Requests, a.Name) {
			out = append(out, a)
		}
	}
	return out
}

// siteRequests are a site's: revoke its agent's certificate, back to the site on the
// sites page.
var siteRequests = &target{Path: "sites", Noun: "site", Actions: []action{
	{actionRevoke, "revoke agent certificate", func(r *http.Request, id string) (string, any, any) {
		return "sites.revokeCertificates", api.RevokeSiteCertificatesRequest{SiteID: id, Reason: r.PostFormValue("reason")}, &api.CertificatesRevoked{}
	}},
}, back: func(id string) string { return "/ui/sites#site-" + url.PathEscape(id) }}

// action is the request of t a path names; false when t has none of that name.
func (t *target) action(name string) (action, bool) {
	i := slices.IndexFunc(t.Actions, func(a action) bool { return a.Name == name })
	if i < 0 {
		return action{}, false
	}
	return t.Actions[i], true
}

// confirmData is the confirmation page of a request on an object.
type confirmData struct {
	Target *target
	ID     string
	Action action
	// Post is where the form sends the request: the id escaped as one path segment, as a
	// path the id came in may hold / and ? (%2F, %3F) that would send it elsewhere.
	Post string
	// Back is the object's page.
	Back     string
	Profiles []api.ProfileView
	// Profile, Wipe and Reason are what the form asked, shown again when the API refused
	// it.
	Profile   string
	Wipe      string
	WipeModes []string
	Reason    string
	MaxReason int
}

// confirm asks before a request that changes an object of t.
func (c *Console) confirm(t *target) func(w http.ResponseWriter, r *http.Request, s *session) {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		c.showConfirm(t, w, r, s, http.StatusOK, nil)
	}
}

func (c *Console) showConfirm(t *target, w http.ResponseWriter, r *http.Request, s *session, status int, refusal *proto.Error) {
	id := r.PathValue("id")
	d := confirmData{Target: t, ID: id, Back: t.back(id), Profile: r.PostFormValue("profile"), Wipe: r.PostFormValue("wipe"),
		WipeModes: proto.WipeModes, Reason: r.PostFormValue("reason"), MaxReason: proto.MaxReason}
	a, ok := t.action(r.PathValue("action"))
	if !ok {
		var names []string
		for _, a := range t.Actions {
			names = append(names, a.Name)
		}
		c.render(w, r, http.StatusNotFound, "error", s, view{Title: "Not found", Nav: t.Path,
			Err: proto.Errorf(proto.NotFound, "no request %s on a %s: the console's are %s", proto.Quote(r.PathValue("action")), t.Noun, strings.Join(names, ", "))})
		return
	}
	d.Action, d.Post = a, "/ui/"+t.Path+"/"+url.PathEscape(id)+"/"+a.Name
	if a.Name == actionDeploy {
		var list api.ProfileList
		if c.call(r.Context(), s, "profiles.list", api.ListProfilesRequest{ListRequest: api.ListRequest{Limit: pageSize}}, &list) == nil {
			d.Profiles = list.Profiles
		}
	}
	c.render(w, r, status, "confirm", s, view{Title: a.Label + " " + id, Nav: t.Path, Err: refusal, Data: &d})
}

// act makes the confirmed request on an object of t through the API and goes back to
// the object's page; a refusal shows the API's answer on the confirmation page.
func (c *Console) act(t *target) func(w http.ResponseWriter, r *http.Request, s *session) {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		id := r.PathValue("id")
		a, ok := t.action(r.PathValue("action"))
		if !ok {
			c.showConfirm(t, w, r, s, http.StatusNotFound, nil)
			return
		}
		method, req, resp := a.request(r, id)
		if err := c.call(r.Context(), s, method, req, resp); err != nil {
			if proto.CodeOf(err) == proto.Unauthenticated {
				c.refused(w, r, s, a.Name, err)
				return
			}
			e, status := refusal(w, err)
			c.showConfirm(t, w, r, s, status, e)
			return
		}
		c.log.Info("console request", "request", a.Name, t.Noun, id, "tenant", s.tenant, "credential", s.credentialID)
		http.Redirect(w, r, t.back(id), http.StatusSeeOther)
	}
}
