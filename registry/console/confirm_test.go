package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"testing"
)

var formAction = regexp.MustCompile(`<form class="card" method="post" action="([^"]*)">`)

// TestAConfirmationPostsTheRequestItNames: a confirmation page's form sends the request
// the page asks about, on the object it names, whatever its URL holds. The attacker
// hands acme's operator a link to a confirmation (opened from the address bar or a
// bookmark: SameSite=Strict keeps a click from another site signed out) whose node id
// is the node's own with "/cancel?" after it (a path segment with %2F and %3F): the
// page asks to revoke the
// agent certificates of "ND/cancel?", a node that does not exist, and its form, the id
// written into its action as it came, posted to /ui/nodes/ND/cancel: Yes cancelled the
// node's enrollment (or, from a deploy's page, released an active node, its disks
// wiped). The operator's own session and form token made the request.
func TestAConfirmationPostsTheRequestItNames(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t)
	b := newClient(t, reg)
	if p := b.signIn(acme); p.status != http.StatusSeeOther {
		t.Fatalf("sign in: %d\n%s", p.status, p.body)
	}
	link := "/ui/nodes/" + url.PathEscape(acmeNode.ID+"/cancel?") + "/revoke-certificates"
	p := b.get(link)
	m, token := formAction.FindStringSubmatch(p.body), csrfField.FindStringSubmatch(p.body)
	if p.status != http.StatusOK || m == nil || token == nil {
		t.Fatalf("the confirmation at %s: %d\n%s", link, p.status, p.body)
	}
	// The browser sends the form where its action, resolved against the page, points.
	page, _ := url.Parse(reg.URL + link)
	action, err := url.Parse(html.UnescapeString(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	sent := page.ResolveReference(action)
	if sent.Path != "/ui/nodes/"+acmeNode.ID+"/cancel?/revoke-certificates" || sent.RawQuery != "" {
		t.Errorf("the confirmation to revoke the agents of %q posts to %s", acmeNode.ID+"/cancel?", sent)
	}
	b.post(sent.RequestURI(), url.Values{"csrf": {token[1]}, "reason": {"rotation"}})
	n := nodeOf(t, reg, "acme", acmeNode.ID)
	if n.State != acmeNode.State || n.Rev != acmeNode.Rev {
		t.Errorf("the confirmed revocation of another id changed node %s: %s rev %d, was %s rev %d", acmeNode.ID, n.State, n.Rev, acmeNode.State, acmeNode.Rev)
	}
}
