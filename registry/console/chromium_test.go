package console_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/console"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// sessionCookie is the session cookie as Chromium keeps it.
func sessionCookie(t *testing.T, ctx context.Context) *network.Cookie {
	t.Helper()
	cookies, err := chromedp.Run(ctx, func(ctx context.Context, tg *chromedp.Target) ([]*network.Cookie, error) {
		res, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{})
		return res.Cookies, err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cookies {
		if c.Name == console.SessionCookie {
			return c
		}
	}
	return nil
}

// signedIn starts a headless Chromium for reg's console and signs it in, as an operator
// would, with the credential of the CLI config at config.
func signedIn(t *testing.T, reg *testkit.Registry, config string) context.Context {
	t.Helper()
	ctx := browser.Start(t, reg.URL)
	cfg, _ := api.LoadClientConfig(config)
	if err := browser.SignIn(ctx, reg.URL, cfg.Credential); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	return ctx
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("%s: %v", sel, err)
	}
	return s
}

// TestChromiumSignInFindANodeAndNoOtherTenant: in a real Chromium, tenant acme signs in
// with its credential, finds its node by id and opens its page; Chromium keeps the
// session cookie HttpOnly, Secure and SameSite=Strict, out of the page's scripts; beta's
// node never appears, and its URL opened directly shows what a node that does not exist
// shows.
func TestChromiumSignInFindANodeAndNoOtherTenant(t *testing.T) {
	reg, acme, acmeNode, betaNode := twoTenants(t)
	ctx := signedIn(t, reg, acme)
	c := sessionCookie(t, ctx)
	if c == nil || !c.HTTPOnly || !c.Secure || c.SameSite != network.CookieSameSiteStrict || c.Session {
		t.Errorf("Chromium keeps the session cookie as %+v", c)
	}
	if js, err := chromedp.Run(ctx, chromedp.Evaluate[string]("document.cookie")); err != nil || js != "" {
		t.Errorf("the page's scripts read the cookies %q (%v)", js, err)
	}

	if got := text(t, ctx, "#nodes"); !strings.Contains(got, acmeNode.ID) || strings.Contains(got, betaNode.ID) {
		t.Errorf("acme's nodes:\n%s", got)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("find"), acmeNode.ID), chromedp.Submit(chromedp.ID("find")),
		chromedp.WaitVisible(chromedp.ID("node-state"))); err != nil {
		t.Fatalf("find a node: %v", err)
	}
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); loc != reg.URL+"/ui/nodes/"+acmeNode.ID {
		t.Errorf("finding %s opened %s", acmeNode.ID, loc)
	}
	if got := text(t, ctx, "main"); !strings.Contains(got, "52:54:00:aa:00:01") || !strings.Contains(got, "enrolling") {
		t.Errorf("acme's node page:\n%s", got)
	}

	open := func(id string) string {
		if err := chromedp.Do(ctx, chromedp.Navigate(reg.URL+"/ui/nodes/"+id), chromedp.WaitVisible(chromedp.ID("error"))); err != nil {
			t.Fatalf("open %s: %v", id, err)
		}
		return text(t, ctx, "main")
	}
	const missing = "nd_00000000deadbeef"
	theirs, none := open(betaNode.ID), open(missing)
	if strings.ReplaceAll(theirs, betaNode.ID, "ID") != strings.ReplaceAll(none, missing, "ID") || !strings.Contains(theirs, "NOT_FOUND") {
		t.Errorf("beta's node shows\n%s\na missing node\n%s", theirs, none)
	}
	if strings.Contains(theirs, "52:54:00:bb:00:01") {
		t.Errorf("beta's node page shows its MAC")
	}
}

// TestChromiumRefusesACrossSiteForm: a page of another site (127.0.0.2) that a signed-in
// operator opens posts the release form to the console by itself. Chromium sends no
// session cookie with it (SameSite=Strict), and the console refuses it for its Origin
// and its missing token: the node stays as it was.
func TestChromiumRefusesACrossSiteForm(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t)
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 on this host's loopback: %v", err)
	}
	attacker := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/ui/nodes/%s/release"><input name="wipe" value="none"></form>
<script>document.getElementById("f").submit()</script>`, reg.URL, acmeNode.ID)
	})}
	go attacker.Serve(ln)
	t.Cleanup(func() { attacker.Close() })

	ctx := signedIn(t, reg, acme)
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+ln.Addr().String()+"/"), chromedp.WaitVisible(chromedp.ID("error"))); err != nil {
		t.Fatalf("the attacker's page: %v", err)
	}
	if got := text(t, ctx, "#error"); !strings.Contains(got, "FORBIDDEN") {
		t.Errorf("the cross-site form shows %q", got)
	}
	var n store.Node
	testkit.JSON(t, reg.AdminConfig, &n, "nodes", "get", acmeNode.ID, "--tenant", "acme")
	if n.Rev != acmeNode.Rev {
		t.Errorf("the cross-site form changed the node: rev %d, was %d", n.Rev, acmeNode.Rev)
	}
	// The operator's session still works: the refusal ended nothing.
	if err := chromedp.Do(ctx, chromedp.Navigate(reg.URL+"/ui/nodes"), chromedp.WaitVisible(chromedp.ID("tenant"))); err != nil {
		t.Errorf("the console after the refusal: %v", err)
	}
}

// TestChromiumKnownMACsPage: in a real Chromium, the platform's operator opens the Sites
// page, follows rack-a's known MACs link, and sees how many MACs the site knows of the
// bound and beta's MACs left out, with their nodes.
func TestChromiumKnownMACsPage(t *testing.T) {
	reg, leftOut, _ := overBound(t, 2)
	ctx := signedIn(t, reg, reg.AdminConfig)
	if err := chromedp.Do(ctx, chromedp.Navigate(reg.URL+"/ui/sites"), chromedp.Click(chromedp.ID("known-macs-rack-a")),
		chromedp.WaitVisible(chromedp.ID("left-out"))); err != nil {
		t.Fatalf("follow rack-a's known MACs link: %v", err)
	}
	if got := text(t, ctx, "#known"); got != fmt.Sprintf("%d of at most %d", proto.MaxKnownMACs, proto.MaxKnownMACs) {
		t.Errorf("rack-a knows %q", got)
	}
	table := text(t, ctx, "#left-out")
	for _, l := range leftOut {
		if !strings.Contains(table, l.MAC) || !strings.Contains(table, l.Node) {
			t.Errorf("the left-out MACs show no %s of %s:\n%s", l.MAC, l.Node, table)
		}
	}
}

// TestChromiumFollowsALiveStreamNoOtherOriginTakes: a page of another origin of the
// same site (a sibling subdomain, another https port of the registry's host), which an
// operator signed in to the console opens, is sent the operator's SameSite=Strict
// session cookie: it frames the operator's node's live stream eight times, as many as a
// session holds, each request carrying the browser's Sec-Fetch-Site: same-site. Each is
// refused FORBIDDEN, and the console's own page in Chromium still follows the node.
// Before, the eight streams were opened and held, and the operator's own page was
// refused 429, following nothing while that page stayed open.
func TestChromiumFollowsALiveStreamNoOtherOriginTakes(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t)
	ctx := signedIn(t, reg, acme)
	c := sessionCookie(t, ctx)
	if c == nil {
		t.Fatal("Chromium keeps no session cookie")
	}
	// The sibling's frames: the operator's browser sends them the session cookie.
	sibling := newClient(t, reg)
	u, _ := url.Parse(reg.URL)
	sibling.client.Jar.SetCookies(u, []*http.Cookie{{Name: c.Name, Value: c.Value, Path: "/", Secure: true, HttpOnly: true}})
	frames, stop := context.WithCancel(context.Background())
	defer stop()
	for i := range 8 {
		req, _ := http.NewRequestWithContext(frames, http.MethodGet, reg.URL+"/ui/nodes/"+acmeNode.ID+"/live", nil)
		req.Header.Set("Sec-Fetch-Site", "same-site")
		req.Header.Set("Sec-Fetch-Mode", "navigate")
		req.Header.Set("Sec-Fetch-Dest", "iframe")
		resp, err := sibling.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			t.Errorf("frame %d of another origin opened the operator's live stream", i+1)
			continue // held open, as the frame holds it, until the test ends
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "FORBIDDEN") {
			t.Errorf("frame %d of another origin: %d %s", i+1, resp.StatusCode, body)
		}
	}
	followed, err := chromedp.Run(ctx, chromedp.Evaluate[string](`new Promise(done => {
  const s = new EventSource("/ui/nodes/`+acmeNode.ID+`/live");
  s.addEventListener("update", e => { s.close(); done(e.data.includes('id="events"') ? "update" : e.data); });
  s.onerror = () => { s.close(); done("error"); };
})`, chromedp.EvalAwaitPromise))
	if err != nil || followed != "update" {
		t.Errorf("the console's own page following the node's live stream: %q (%v)", followed, err)
	}
}
