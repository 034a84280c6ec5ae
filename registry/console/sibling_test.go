package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
)

// siblingLoads are the loads of a console URL a page of another origin of the same site
// (a sibling subdomain, another https port of the registry's host) may make, with the
// Sec-Fetch headers a browser sends with each; the browser sends the operator's
// SameSite=Strict cookies with every one.
var siblingLoads = map[string]map[string]string{
	"an image":        {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"},
	"a script":        {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "script"},
	"a style":         {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "style"},
	"a frame":         {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"},
	"a fetch":         {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"},
	"a no-cors fetch": {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "empty"},
}

// siblingLink is a link of a sibling's page the operator follows: a top-level
// navigation.
var siblingLink = map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}

// apiCalls counts the API's "api call" lines in reg's log so far.
func apiCalls(log string) int { return strings.Count(log, `msg="api call"`) }

// logged is reg's log once it holds every line written before this call: the registry
// writes it as it serves, and the test reads it from the process's stderr. A form
// refused marks the point, logged with no API call.
func (b *client) logged(reg *testkit.Registry) string {
	b.t.Helper()
	marks := strings.Count(reg.Stderr.String(), `msg="console form refused"`)
	b.post("/ui/signout", url.Values{})
	testkit.WaitFor(b.t, "the registry's log", 10*time.Second, 10*time.Millisecond, func() bool {
		return strings.Count(reg.Stderr.String(), `msg="console form refused"`) > marks
	})
	return reg.Stderr.String()
}

// TestASiblingOriginLoadsNoConsolePage: a page of another origin of the same site, which
// a signed-in operator opens, loads each console page that calls the API as an image, a
// script, a style, a frame and a fetch, the browser sending the operator's session
// cookie with each. Each is refused FORBIDDEN and logged before the API is called: the
// registry's log holds no API call made for them. A link of that page to the console
// still opens it. Before, each load was served as the operator's, calling the API with
// the session's credential (counted against the tenant's bounds) though the sibling could
// not read the answer.
func TestASiblingOriginLoadsNoConsolePage(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t)
	b := newClient(t, reg)
	if p := b.signIn(acme); p.status != http.StatusSeeOther {
		t.Fatalf("sign in: %d\n%s", p.status, p.body)
	}
	pages := []string{"/ui/nodes", "/ui/nodes/" + acmeNode.ID, "/ui/nodes/" + acmeNode.ID + "/deploy", "/ui/sites",
		"/ui/sites/rack-a/known-macs", "/ui/sites/rack-a/revoke-certificates", "/ui/pools", "/ui/images"}
	before := apiCalls(b.logged(reg))
	for _, path := range pages {
		for load, header := range siblingLoads {
			if p := b.do(http.MethodGet, path, nil, header); p.status != http.StatusForbidden || !strings.Contains(p.body, "FORBIDDEN") {
				t.Errorf("%s of %s from a sibling origin: %d\n%s", load, path, p.status, p.body)
			}
		}
	}
	log := b.logged(reg)
	if n := apiCalls(log) - before; n != 0 {
		t.Errorf("the sibling's loads called the API %d times", n)
	}
	if n := strings.Count(log, `msg="console fetch refused"`); n != len(pages)*len(siblingLoads) {
		t.Errorf("%d refusals logged of %d", n, len(pages)*len(siblingLoads))
	}

	// A link to the console, followed, opens the page as the operator's.
	if p := b.do(http.MethodGet, "/ui/nodes/"+acmeNode.ID, nil, siblingLink); p.status != http.StatusOK || !strings.Contains(p.body, acmeNode.ID) {
		t.Errorf("a sibling's link to the node's page: %d\n%s", p.status, p.body)
	}
	if apiCalls(b.logged(reg)) == before {
		t.Errorf("the node's page opened by a link called no API")
	}
}

// TestASiblingOriginKeepsTheSignInFormsToken: an operator opens the sign-in page; before
// the form is sent, a page of another origin of the same site loads the sign-in page as
// an image, and opens it in another tab by a link. The image is refused FORBIDDEN,
// setting no cookie, and the other tab's form carries the same token, so the operator's
// form still signs in. Before, each answer set a new __Host-bc-signin cookie, which the
// browser takes from a same-site answer, and the operator's sign-in was refused
// FORBIDDEN ("the sign-in form expired or is not this browser's").
func TestASiblingOriginKeepsTheSignInFormsToken(t *testing.T) {
	reg, acme, _, _ := twoTenants(t)
	b := newClient(t, reg)
	token := b.csrf("/ui/signin")
	if p := b.do(http.MethodGet, "/ui/signin", nil, siblingLoads["an image"]); p.status != http.StatusForbidden || len(p.header.Values("Set-Cookie")) > 0 {
		t.Errorf("the sign-in page as a sibling's image: %d, cookies %q", p.status, p.header.Values("Set-Cookie"))
	}
	if p := b.do(http.MethodGet, "/ui/signin", nil, siblingLink); p.status != http.StatusOK || !strings.Contains(p.body, `value="`+token+`"`) {
		t.Errorf("the sign-in page opened by a sibling's link: %d\n%s", p.status, p.body)
	}
	cfg, _ := api.LoadClientConfig(acme)
	p := b.post("/ui/signin", url.Values{"credential": {cfg.Credential}, "csrf": {token}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("the operator's sign-in: %d\n%s", p.status, p.body)
	}
	sessionCookieOf(t, p)
}
