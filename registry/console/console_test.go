package console_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/console"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
)

// client is a plain HTTP client of the console that behaves as a browser on its pages:
// a cookie jar, and the console's own Origin on every POST unless told otherwise.
type client struct {
	t      *testing.T
	base   string
	client *http.Client
}

func newClient(t *testing.T, reg *testkit.Registry) *client {
	cfg, err := api.LoadClientConfig(reg.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(cfg.ServingCA))
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: reg.URL, client: &http.Client{Jar: jar,
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// page is an answer of the console.
type page struct {
	status int
	header http.Header
	body   string
}

func (b *client) do(method, path string, form url.Values, header map[string]string) page {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return page{resp.StatusCode, resp.Header, string(data)}
}

func (b *client) get(path string) page { return b.do(http.MethodGet, path, nil, nil) }

// post sends a form from the console's own origin.
func (b *client) post(path string, form url.Values) page {
	return b.do(http.MethodPost, path, form, map[string]string{"Origin": b.base})
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the form token of the page at path.
func (b *client) csrf(path string) string {
	b.t.Helper()
	p := b.get(path)
	m := csrfField.FindStringSubmatch(p.body)
	if m == nil {
		b.t.Fatalf("%s (%d) has no form token:\n%s", path, p.status, p.body)
	}
	return m[1]
}

// signIn signs in with the credential of config and returns the sign-in's answer.
func (b *client) signIn(config string) page {
	b.t.Helper()
	cfg, err := api.LoadClientConfig(config)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.post("/ui/signin", url.Values{"credential": {cfg.Credential}, "csrf": {b.csrf("/ui/signin")}})
}

func (b *client) cookie(name string) *http.Cookie {
	u, _ := url.Parse(b.base)
	for _, c := range b.client.Jar.Cookies(u) {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func sessionCookieOf(t *testing.T, p page) *http.Cookie {
	t.Helper()
	for _, line := range p.header.Values("Set-Cookie") {
		c, err := http.ParseSetCookie(line)
		if err == nil && c.Name == console.SessionCookie && c.Value != "" {
			return c
		}
	}
	t.Fatalf("no session cookie set (%d): %v\n%s", p.status, p.header.Values("Set-Cookie"), p.body)
	return nil
}

// TestSessionCookie: signing in sets a session cookie the browser keeps to this host,
// over HTTPS, from the console's own pages, out of scripts' reach, for at most the
// documented lifetime or the credential's, holding a random id and not the credential;
// signing out ends the session on the registry, so the old cookie opens nothing.
func TestSessionCookie(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	b := newClient(t, reg)
	if p := b.get("/ui/nodes"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/signin" {
		t.Fatalf("a page without a session: %d %s", p.status, p.header.Get("Location"))
	}
	p := b.signIn(reg.AdminConfig)
	c := sessionCookieOf(t, p)
	if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Domain != "" ||
		c.MaxAge <= 0 || c.MaxAge > int(console.SessionLifetime.Seconds()) || !strings.HasPrefix(c.Name, "__Host-") {
		t.Errorf("session cookie %q", c.String())
	}
	cfg, _ := api.LoadClientConfig(reg.AdminConfig)
	if strings.Contains(c.Value, cfg.Credential) || len(c.Value) < 43 {
		t.Errorf("the session cookie %q is not a random id apart from the credential", c.Value)
	}
	if p := b.get("/ui/nodes"); p.status != http.StatusOK || !strings.Contains(p.body, `id="tenant">root<`) {
		t.Fatalf("nodes after sign-in: %d\n%s", p.status, p.body)
	}

	// A credential that expires sooner ends the session with it.
	short := filepath.Join(t.TempDir(), "short.conf")
	testkit.JSON(t, reg.AdminConfig, nil, "credentials", "create", "--tenant", "root", "--actions", "compute:nodes:read", "--expires", "1h", "--out", short)
	if c := sessionCookieOf(t, newClient(t, reg).signIn(short)); c.MaxAge > 3600 || c.MaxAge < 3500 {
		t.Errorf("a session of a credential expiring in 1h lasts %d s", c.MaxAge)
	}

	old := b.cookie(console.SessionCookie)
	if p := b.post("/ui/signout", url.Values{"csrf": {b.csrf("/ui/nodes")}}); p.status != http.StatusSeeOther {
		t.Fatalf("sign out: %d\n%s", p.status, p.body)
	}
	if b.cookie(console.SessionCookie) != nil {
		t.Errorf("the session cookie outlived the sign-out")
	}
	replay := newClient(t, reg)
	u, _ := url.Parse(reg.URL)
	replay.client.Jar.SetCookies(u, []*http.Cookie{old})
	if p := replay.get("/ui/nodes"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/signin" {
		t.Errorf("the signed-out session's cookie still opens the console: %d", p.status)
	}
}

// TestSignInRefusals: a wrong secret, a revoked credential, and a sign-in form posted
// from another site or without its token make no session.
func TestSignInRefusals(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	revoked := filepath.Join(t.TempDir(), "revoked.conf")
	var cred api.CreatedCredential
	testkit.JSON(t, reg.AdminConfig, &cred, "credentials", "create", "--tenant", "root", "--actions", "compute:nodes:read", "--out", revoked)
	testkit.JSON(t, reg.AdminConfig, nil, "credentials", "revoke", cred.ID)
	cases := map[string]func(b *client) page{
		"a wrong secret": func(b *client) page {
			return b.post("/ui/signin", url.Values{"credential": {"bc_not-a-credential"}, "csrf": {b.csrf("/ui/signin")}})
		},
		"a revoked credential": func(b *client) page { return b.signIn(revoked) },
		"a form from another site": func(b *client) page {
			cfg, _ := api.LoadClientConfig(reg.AdminConfig)
			return b.do(http.MethodPost, "/ui/signin", url.Values{"credential": {cfg.Credential}, "csrf": {b.csrf("/ui/signin")}},
				map[string]string{"Origin": "https://attacker.example", "Sec-Fetch-Site": "cross-site"})
		},
		"a form without its token": func(b *client) page {
			cfg, _ := api.LoadClientConfig(reg.AdminConfig)
			b.csrf("/ui/signin")
			return b.post("/ui/signin", url.Values{"credential": {cfg.Credential}})
		},
	}
	for name, try := range cases {
		t.Run(name, func(t *testing.T) {
			b := newClient(t, reg)
			p := try(b)
			if p.status != http.StatusUnauthorized && p.status != http.StatusForbidden {
				t.Errorf("status %d\n%s", p.status, p.body)
			}
			if b.cookie(console.SessionCookie) != nil {
				t.Errorf("a session was made")
			}
			if p := b.get("/ui/nodes"); p.status != http.StatusSeeOther {
				t.Errorf("the console opened: %d", p.status)
			}
		})
	}
}

// twoTenants is a registry (serve's flags, if any, added) where tenant acme and tenant
// beta each have a node, and acme's credential may read and manage nodes.
func twoTenants(t *testing.T, serve ...string) (reg *testkit.Registry, acme string, acmeNode, betaNode store.Node) {
	reg = testkit.StartRegistry(t, "", serve...)
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a")
	for _, tenant := range []string{"acme", "beta"} {
		testkit.JSON(t, admin, nil, "tenants", "create", tenant)
		testkit.JSON(t, admin, nil, "pools", "create", "gpu", "--tenant", tenant, "--site", "rack-a")
	}
	acme = filepath.Join(t.TempDir(), "acme.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "acme", "--actions", "compute:nodes:read,compute:nodes:manage,compute:pools:manage", "--out", acme)
	testkit.JSON(t, admin, &acmeNode, "nodes", "enroll", "--tenant", "acme", "--pool", "gpu", "--mac", "52:54:00:aa:00:01", "--bmc-driver", "qmp", "--bmc-address", "unix:///run/a.sock")
	testkit.JSON(t, admin, &betaNode, "nodes", "enroll", "--tenant", "beta", "--pool", "gpu", "--mac", "52:54:00:bb:00:01", "--bmc-driver", "qmp", "--bmc-address", "unix:///run/b.sock")
	return reg, acme, acmeNode, betaNode
}

// TestAnotherTenantsNodeIsNotThere: tenant acme, signed in, never sees beta's node: not
// in its list, and beta's node's page, live stream and forms answer exactly as a node
// that does not exist.
func TestAnotherTenantsNodeIsNotThere(t *testing.T) {
	reg, acme, acmeNode, betaNode := twoTenants(t)
	b := newClient(t, reg)
	if p := b.signIn(acme); p.status != http.StatusSeeOther {
		t.Fatalf("sign in: %d\n%s", p.status, p.body)
	}
	list := b.get("/ui/nodes")
	if list.status != http.StatusOK || !strings.Contains(list.body, acmeNode.ID) || strings.Contains(list.body, betaNode.ID) {
		t.Errorf("acme's node list (%d) shows %s: %v, %s: %v", list.status, acmeNode.ID, strings.Contains(list.body, acmeNode.ID),
			betaNode.ID, strings.Contains(list.body, betaNode.ID))
	}
	if p := b.get("/ui/nodes/" + acmeNode.ID); p.status != http.StatusOK || !strings.Contains(p.body, "52:54:00:aa:00:01") ||
		!strings.Contains(p.body, `data-kind="node.state"`) {
		t.Errorf("acme's own node, with its event log: %d\n%s", p.status, p.body)
	}
	const missing = "nd_00000000deadbeef"
	token := b.csrf("/ui/nodes/" + acmeNode.ID + "/release")
	for _, path := range []string{"/ui/nodes/%s", "/ui/nodes/%s?before=2", "/ui/nodes/%s/live", "/ui/nodes/%s/release"} {
		theirs := b.get(strings.Replace(path, "%s", betaNode.ID, 1))
		none := b.get(strings.Replace(path, "%s", missing, 1))
		if path == "/ui/nodes/%s/release" {
			theirs = b.post("/ui/nodes/"+betaNode.ID+"/release", url.Values{"csrf": {token}})
			none = b.post("/ui/nodes/"+missing+"/release", url.Values{"csrf": {token}})
		}
		if theirs.status != http.StatusNotFound || theirs.status != none.status ||
			strings.ReplaceAll(theirs.body, betaNode.ID, "ID") != strings.ReplaceAll(none.body, missing, "ID") {
			t.Errorf("%s: beta's node answers %d\n%s\nand a missing one %d\n%s", path, theirs.status, theirs.body, none.status, none.body)
		}
		if strings.Contains(theirs.body, "52:54:00:bb:00:01") {
			t.Errorf("%s shows beta's node's MAC", path)
		}
	}
	var n store.Node
	testkit.JSON(t, reg.AdminConfig, &n, "nodes", "get", betaNode.ID, "--tenant", "beta")
	if n.Rev != betaNode.Rev || n.State != betaNode.State {
		t.Errorf("beta's node changed: %s rev %d, was %s rev %d", n.State, n.Rev, betaNode.State, betaNode.Rev)
	}
}

// TestFormsRefuseCrossSiteRequests: a state-changing form is refused unless it comes
// from the console's own origin with the token of the session its cookie names: not
// from another site (with or without the token), not without its token, not with the
// token of another session; the node stays as it was. The same form from the page
// itself reaches the API.
func TestFormsRefuseCrossSiteRequests(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t)
	victim, other := newClient(t, reg), newClient(t, reg)
	victim.signIn(acme)
	other.signIn(acme)
	path := "/ui/nodes/" + acmeNode.ID + "/release"
	own, others := victim.csrf(path), other.csrf(path)
	if own == others {
		t.Fatalf("two sessions share a form token")
	}
	cases := map[string]struct {
		form   url.Values
		header map[string]string
	}{
		"another site, no token":            {url.Values{}, map[string]string{"Origin": "https://attacker.example", "Sec-Fetch-Site": "cross-site"}},
		"another site, the session token":   {url.Values{"csrf": {own}}, map[string]string{"Origin": "https://attacker.example"}},
		"no Origin":                         {url.Values{"csrf": {own}}, nil},
		"a same-site page of another port":  {url.Values{"csrf": {own}}, map[string]string{"Origin": "https://127.0.0.1:1"}},
		"the page, no token":                {url.Values{}, map[string]string{"Origin": reg.URL}},
		"the page, another session's token": {url.Values{"csrf": {others}}, map[string]string{"Origin": reg.URL}},
		"a fetch from another site with Origin forged by a proxy": {url.Values{"csrf": {own}},
			map[string]string{"Origin": reg.URL, "Sec-Fetch-Site": "cross-site"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := victim.do(http.MethodPost, path, tc.form, tc.header)
			if p.status != http.StatusForbidden || !strings.Contains(p.body, "FORBIDDEN") {
				t.Errorf("status %d\n%s", p.status, p.body)
			}
		})
	}
	var n store.Node
	testkit.JSON(t, reg.AdminConfig, &n, "nodes", "get", acmeNode.ID, "--tenant", "acme")
	if n.Rev != acmeNode.Rev {
		t.Fatalf("a refused form changed the node: rev %d, was %d", n.Rev, acmeNode.Rev)
	}
	// From the page with its token the request reaches the API, which answers for the
	// node's state (an enrolling node is not released).
	p := victim.post(path, url.Values{"csrf": {own}})
	if p.status == http.StatusForbidden || !strings.Contains(p.body, "INVALID_STATE") {
		t.Errorf("the confirmed release: %d\n%s", p.status, p.body)
	}
}

// TestSignInsOfOneTenantEndNoSessionOfAnother: tenant beta, holding a credential that
// may only read its nodes, signs in to the console as many times as the registry keeps
// sessions, as fast as it can, each time with a sign-in form token of its own making;
// acme's operator, signed in first, stays signed in, and beta's newest session works.
// Before, the session that would expire first ended at each sign-in beyond the bound,
// whoever's it was: beta signed acme out with MaxSessions sign-ins, and kept it out.
func TestSignInsOfOneTenantEndNoSessionOfAnother(t *testing.T) {
	reg, acme, _, _ := twoTenants(t)
	beta := filepath.Join(t.TempDir(), "beta.conf")
	testkit.JSON(t, reg.AdminConfig, nil, "credentials", "create", "--tenant", "beta", "--actions", "compute:nodes:read", "--out", beta)
	victim := newClient(t, reg)
	victim.signIn(acme)
	if p := victim.get("/ui/nodes"); p.status != http.StatusOK {
		t.Fatalf("acme's nodes: %d", p.status)
	}

	cfg, err := api.LoadClientConfig(beta)
	if err != nil {
		t.Fatal(err)
	}
	attacker := newClient(t, reg).client
	attacker.Jar = nil
	signIn := func() error {
		const token = "beta-made-this-form-token"
		form := url.Values{"credential": {cfg.Credential}, "csrf": {token}}
		req, _ := http.NewRequest(http.MethodPost, reg.URL+"/ui/signin", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", reg.URL)
		req.AddCookie(&http.Cookie{Name: "__Host-bc-signin", Value: token})
		resp, err := attacker.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			return fmt.Errorf("beta's sign-in: %d", resp.StatusCode)
		}
		return nil
	}
	jobs, failed := make(chan struct{}), make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range jobs {
				if err := signIn(); err != nil {
					failed <- err
					return
				}
			}
		})
	}
	for range console.MaxSessions {
		select {
		case jobs <- struct{}{}:
		case err := <-failed:
			close(jobs)
			wg.Wait()
			t.Fatal(err)
		}
	}
	close(jobs)
	wg.Wait()
	if p := victim.get("/ui/nodes"); p.status != http.StatusOK {
		t.Errorf("acme's operator after beta's %d sign-ins: %d %s, want still signed in", console.MaxSessions, p.status, p.header.Get("Location"))
	}
	newest := newClient(t, reg)
	newest.signIn(beta)
	if p := newest.get("/ui/nodes"); p.status != http.StatusOK || !strings.Contains(p.body, `id="tenant">beta<`) {
		t.Errorf("beta's newest session: %d", p.status)
	}
}

// TestSessionEndsWhenTheCredentialDoes: revoking the credential a session signed in
// with closes the console to it at its next page, as it does the API.
func TestSessionEndsWhenTheCredentialDoes(t *testing.T) {
	reg, acme, _, _ := twoTenants(t)
	b := newClient(t, reg)
	b.signIn(acme)
	if p := b.get("/ui/nodes"); p.status != http.StatusOK {
		t.Fatalf("nodes: %d", p.status)
	}
	var creds api.CredentialList
	testkit.JSON(t, reg.AdminConfig, &creds, "credentials", "list", "--tenant", "acme")
	testkit.JSON(t, reg.AdminConfig, nil, "credentials", "revoke", creds.Credentials[0].ID)
	p := b.get("/ui/nodes")
	if p.status != http.StatusUnauthorized || !strings.Contains(p.body, "UNAUTHENTICATED") {
		t.Errorf("a revoked credential's session: %d\n%s", p.status, p.body)
	}
	if p := b.get("/ui/nodes"); p.status != http.StatusSeeOther {
		t.Errorf("the session outlived its credential: %d", p.status)
	}
}

// TestPagesAreTheAPIsAnswers: each page shows what the API answers the signed-in
// credential, refusals included: sites are the platform's, so acme's credential gets the
// API's FORBIDDEN where the admin sees rack-a; acme's pools are its own; a credential
// without compute:images:read gets the API's refusal of the images.
func TestPagesAreTheAPIsAnswers(t *testing.T) {
	reg, acme, _, _ := twoTenants(t)
	b := newClient(t, reg)
	b.signIn(acme)
	if p := b.get("/ui/sites"); p.status != http.StatusForbidden || !strings.Contains(p.body, "FORBIDDEN") || strings.Contains(p.body, "connected") {
		t.Errorf("acme's sites page: %d\n%s", p.status, p.body)
	}
	if p := b.get("/ui/pools"); p.status != http.StatusOK || !strings.Contains(p.body, "<td>acme</td>") || strings.Contains(p.body, "<td>beta</td>") {
		t.Errorf("acme's pools page: %d\n%s", p.status, p.body)
	}
	if p := b.get("/ui/images"); p.status != http.StatusForbidden || !strings.Contains(p.body, "compute:images:read") {
		t.Errorf("acme's images page: %d\n%s", p.status, p.body)
	}
	admin := newClient(t, reg)
	admin.signIn(reg.AdminConfig)
	if p := admin.get("/ui/sites"); p.status != http.StatusOK || !strings.Contains(p.body, `id="site-rack-a"`) || !strings.Contains(p.body, "never connected") {
		t.Errorf("the admin's sites page: %d\n%s", p.status, p.body)
	}
	if p := admin.get("/ui/nodes?state=sleeping"); p.status != http.StatusBadRequest || !strings.Contains(p.body, "INVALID_INPUT") {
		t.Errorf("a state metal.list does not know: %d\n%s", p.status, p.body)
	}
}

var siteCard = regexp.MustCompile(`<section class="card site" id="site-([^"]+)">`)

// TestSitesPageIsPaged: with more sites than a page, made through the API, the Sites
// page shows the first 100 by name and a Next page link, and the pages it links show
// each site once, in order, the last one too; a cursor no page gave is the API's
// INVALID_INPUT at cursor. Before, the page asked sites.list for the
// first 100 and showed no link: the 101st site was on no page of the console.
func TestSitesPageIsPaged(t *testing.T) {
	const made = 101 // one more than the page the console asks for
	reg := testkit.StartRegistry(t, "")
	cfg, err := api.LoadClientConfig(reg.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	apiClient, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range made {
		var site api.Site
		if err := apiClient.Call(t.Context(), "sites.create", api.CreateSiteRequest{Name: fmt.Sprintf("rack-%03d", i)}, &site); err != nil {
			t.Fatal(err)
		}
		want = append(want, site.ID)
	}
	admin := newClient(t, reg)
	admin.signIn(reg.AdminConfig)
	var shown []int
	var got []string
	for path := "/ui/sites"; path != "" && len(shown) <= made; {
		p := admin.get(path)
		if p.status != http.StatusOK {
			t.Fatalf("%s: %d\n%s", path, p.status, p.body)
		}
		cards := siteCard.FindAllStringSubmatch(p.body, -1)
		shown = append(shown, len(cards))
		for _, m := range cards {
			got = append(got, m[1])
		}
		path = ""
		if m := nextLink.FindStringSubmatch(p.body); m != nil {
			path = html.UnescapeString(m[1])
		}
	}
	if !slices.Equal(got, want) || len(shown) == 0 || shown[0] != made-1 {
		t.Errorf("the Sites pages show %v sites, %d in all, last %q; want the %d made, %d on the first page, last %q",
			shown, len(got), got[max(len(got)-1, 0):], made, made-1, want[made-1])
	}
	if p := admin.get("/ui/sites?cursor=%21"); p.status != http.StatusBadRequest || !strings.Contains(p.body, "INVALID_INPUT") || !strings.Contains(p.body, "at cursor") {
		t.Errorf("a cursor no page gave: %d\n%s", p.status, p.body)
	}
}

// follow gets path and each redirect after it, as a browser does, and returns the
// Locations it was sent to and the last answer.
func (b *client) follow(path string) ([]string, page) {
	b.t.Helper()
	var to []string
	p := b.get(path)
	for p.status/100 == 3 && len(to) < 5 {
		to = append(to, p.header.Get("Location"))
		p = b.get(to[len(to)-1])
	}
	return to, p
}

// TestTheConsolesRootKeepsItsQuery: a link to the console's root with a query (/ui?find=ID,
// /ui?state=...&pool=...) is sent on to /ui/ and then to the Nodes page with its query
// kept, so it opens the node, or the nodes filtered, as it asked. Before, both redirects
// dropped the query, and every such link opened the whole list of nodes.
func TestTheConsolesRootKeepsItsQuery(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t)
	b := newClient(t, reg)
	b.signIn(acme)
	find := "find=" + acmeNode.ID
	to, p := b.follow("/ui?" + find)
	if want := []string{"/ui/?" + find, "/ui/nodes?" + find, "/ui/nodes/" + acmeNode.ID}; !slices.Equal(to, want) ||
		p.status != http.StatusOK || !strings.Contains(p.body, "52:54:00:aa:00:01") {
		t.Errorf("/ui?%s was sent to %q, want %q, and answered %d\n%s", find, to, want, p.status, p.body)
	}
	filter := "state=failed&pool=gpu"
	to, p = b.follow("/ui?" + filter)
	if want := []string{"/ui/?" + filter, "/ui/nodes?" + filter}; !slices.Equal(to, want) ||
		p.status != http.StatusOK || !strings.Contains(p.body, "No node matches the filters") || strings.Contains(p.body, acmeNode.ID) {
		t.Errorf("/ui?%s was sent to %q, want %q, and answered %d\n%s", filter, to, want, p.status, p.body)
	}
}

// TestLiveStreamsPerSessionAreBounded: a session follows at most 8 running workflows at
// once; the 9th stream is refused (429) until one closes.
func TestLiveStreamsPerSessionAreBounded(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t)
	b := newClient(t, reg)
	b.signIn(acme)
	open := func() (*http.Response, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, reg.URL+"/ui/nodes/"+acmeNode.ID+"/live", nil)
		resp, err := b.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, cancel
	}
	var cancels []context.CancelFunc
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	for i := range 8 {
		resp, cancel := open()
		cancels = append(cancels, cancel)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream %d: %d %s", i+1, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		if line != "event: update\n" {
			t.Fatalf("stream %d begins %q", i+1, line)
		}
	}
	resp, cancel := open()
	cancel()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a 9th stream: %d", resp.StatusCode)
	}
}
