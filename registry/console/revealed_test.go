package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
	"github.com/chromedp/chromedp"
)

// TestChromiumShowsTheWorkflowARevocationFailed: in a real Chromium, acme's operator
// revokes its node's agents from the node's page while the node's enrollment runs (its
// relay to rack-a's agent, which never joined, waits) at the identity epoch the
// revocation moves: the revocation fails it, and the node's page it goes back to names
// the failed workflow beside the revocation, with what runs it again for its kind, as
// metal.revokeCertificates' failedWorkflowId and failedWorkflowNext, and `nodes
// revoke-identity`'s "failed workflow" line do. Before, the console showed the revocation alone: which workflow it
// failed was only in the node's events.
func TestChromiumShowsTheWorkflowARevocationFailed(t *testing.T) {
	reg, acme, acmeNode, _ := twoTenants(t)
	if acmeNode.Workflow == "" {
		t.Fatalf("node %s enrolled with no workflow running", acmeNode.ID)
	}
	ctx := signedIn(t, reg, acme)
	if err := chromedp.Do(ctx, chromedp.Navigate(reg.URL+"/ui/nodes/"+acmeNode.ID), chromedp.WaitVisible(chromedp.ID("action-revoke-certificates")),
		chromedp.Click(chromedp.ID("action-revoke-certificates")), chromedp.WaitVisible(chromedp.ID("reason")),
		chromedp.SendKeys(chromedp.ID("reason"), "BMC password leaked"), chromedp.Submit(chromedp.ID("reason")),
		chromedp.WaitVisible(chromedp.ID("agents-revoked"))); err != nil {
		t.Fatalf("revoke the node's agents from its page: %v", err)
	}
	n := nodeOf(t, reg, "acme", acmeNode.ID)
	if n.AgentsRevoked == nil || n.AgentsRevoked.FailedWorkflowID != acmeNode.Workflow {
		t.Fatalf("the node's revocation %+v, want it failing the enrollment %s", n.AgentsRevoked, acmeNode.Workflow)
	}
	if got := text(t, ctx, "#revocation-failed-workflow"); got != acmeNode.Workflow {
		t.Errorf("the page names the failed workflow %q, want %s", got, acmeNode.Workflow)
	}
	if got := text(t, ctx, "#agents-revoked"); !strings.Contains(got, "BMC password leaked") {
		t.Errorf("the revocation shows %q, without its reason", got)
	}
	if got, want := text(t, ctx, "#revocation-next"), "run the enroll workflow again (`nodes retry "+acmeNode.ID+"`)"; got != want || got != n.AgentsRevoked.FailedWorkflowNext {
		t.Errorf("the page says what runs the enrollment again: %q; want %q, as the API's failedWorkflowNext (%q)", got, want, n.AgentsRevoked.FailedWorkflowNext)
	}
}

// TestChromiumShowsWhyASiteRefusedAnImage: in a real Chromium, the platform's operator
// opens the Sites page, whose cache table gives, for an image rack-a's cache failed to
// pull, the reason the site's agent reported (source-not-allowed) and the host its fetch
// was refused at, with the command that lists it in the site's image sources, as `sites
// locations` does in its REASON and REFUSED HOST columns; an image pulled shows neither.
//
// The attacker: a site agent (a compromised rack server, or the host a redirect of an
// image source named) reports a refused host made of markup, which the registry takes
// (printable ASCII without spaces, and a port): `"><svg/onload=...>:443`. The page
// shows it as text, in the cell and in its title attribute as it came, and no element
// of it is in the page: no svg, its onload never ran. Before, the console showed
// neither the reason nor the refused host.
func TestChromiumShowsWhyASiteRefusedAnImage(t *testing.T) {
	reg, _, _, _ := twoTenants(t)
	// register registers ref and returns its id and its location at the site in state.
	register := func(ref, sum string, state proto.ImageCacheState) (string, store.SiteLocation) {
		var img struct{ ID string }
		source, digest := "https://images.example.com/"+ref+".raw", strings.Repeat(sum, 32)
		testkit.JSON(t, reg.AdminConfig, &img, "images", "register", "--tenant", "acme", "--ref", ref, "--source", source,
			"--disk-format", "raw", "--sha256", digest, "--size", "1")
		return img.ID, store.SiteLocation{Site: "rack-a", Digest: digest, Source: source, State: state}
	}
	const host = `"><svg/onload=document.title='injected'>:443`
	refused, refusedAt := register("refused@1", "ab", proto.CacheFailed)
	pulled, pulledAt := register("pulled@1", "cd", proto.CacheReady)
	refusedAt.Reason, refusedAt.RefusedHost = proto.ReasonSourceNotAllowed, host
	pulledAt.SizeBytes, pulledAt.LastUsed = 1, time.Now()
	reg = whileStopped(t, reg, func(tx *store.Tx) error {
		if _, err := tx.PutSiteLocation(refusedAt); err != nil {
			return err
		}
		_, err := tx.PutSiteLocation(pulledAt)
		return err
	})

	ctx := sitesPage(t, reg)
	row := `#site-rack-a tr.location[data-image="` + refused + `"]`
	if got := text(t, ctx, row+" .reason"); got != proto.ReasonSourceNotAllowed {
		t.Errorf("the refused image's reason shows %q, want %s", got, proto.ReasonSourceNotAllowed)
	}
	if got := text(t, ctx, row+" .refused-host"); got != host {
		t.Errorf("the refused host shows %q, want the text %q", got, host)
	}
	if got := text(t, ctx, row+" .why"); !strings.Contains(got, "sites update rack-a --image-sources") {
		t.Errorf("the refused image's row says %q, not how to list the host", got)
	}
	title, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(row+" .refused-host"), "title"))
	if err != nil || title.Value != host {
		t.Errorf("the refused host's title is %q (%v), want %q", title.Value, err, host)
	}
	if got := text(t, ctx, `#site-rack-a tr.location[data-image="`+pulled+`"] .why`); got != "" {
		t.Errorf("the pulled image's row gives why it failed: %q", got)
	}
	injected, err := chromedp.Run(ctx, chromedp.Evaluate[int]("document.querySelectorAll('svg').length"))
	if err != nil || injected != 0 {
		t.Errorf("the page holds %d svg element(s) (%v): the refused host was taken as markup", injected, err)
	}
	if pageTitle, err := chromedp.Run(ctx, chromedp.Title()); err != nil || strings.Contains(pageTitle, "injected") {
		t.Errorf("the page's title is %q (%v): the refused host's script ran", pageTitle, err)
	}
}

// TestChromiumShowsTheCachePlansFailedImages: in a real Chromium, the platform's
// operator opens the Sites page, which lists, beside the cache, the images of the site's
// cache plan its cache failed to pull, with the reason and the host the fetch was
// refused at, as sites.cachePlan's failed and `sites cache-plan`'s FAILED AT THE SITE
// do: acme's pool at rack-a pre-warms the platform's signed image base@1, which rack-a's
// agent reports failed, source-not-allowed.
//
// The attacker: a site agent reports a refused host made of markup, which the registry
// takes: `"><img src=x onerror=...>:443`. The page shows it as text, in the cell and in
// its title attribute as it came, and no element of it is in the page: no img, its
// onerror never ran. Before, the Sites page showed only the cache's own rows.
func TestChromiumShowsTheCachePlansFailedImages(t *testing.T) {
	reg, _, _, _ := twoTenants(t)
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "update", "rack-a", "--image-sources", "images.example.com")
	key := openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "root", "--id", "platform-2026", "--public-key", key.PublicPath)
	var base struct{ ID string }
	testkit.RegisterImage(t, admin, testkit.Image{Tenant: "root", Ref: "base@1", Kind: "os", Source: "https://images.example.com/base-1.raw.zst", Format: "raw",
		Compression: "zstd", SHA256: strings.Repeat("ab", 32), Size: 1 << 20, SignerID: "platform-2026", Signer: key}, &base)
	testkit.JSON(t, admin, nil, "images", "promote", base.ID)
	testkit.JSON(t, admin, nil, "pools", "create", "cached", "--tenant", "acme", "--site", "rack-a", "--prewarm", "base@1")
	const host = `"><img src=x onerror=document.title='injected'>:443`
	reg = whileStopped(t, reg, func(tx *store.Tx) error {
		_, err := tx.PutSiteCacheReport(store.SiteCacheReport{Site: "rack-a", AgentID: "rack-a", Images: []proto.ImageCacheEntry{{Digest: strings.Repeat("ab", 32),
			State: proto.CacheFailed, Sources: []string{"https://images.example.com/base-1.raw.zst"}, Reason: proto.ReasonSourceNotAllowed, RefusedHost: host}}})
		return err
	})
	var plan api.CachePlan
	if testkit.JSON(t, reg.AdminConfig, &plan, "sites", "cache-plan", "rack-a"); len(plan.Failed) != 1 || plan.Failed[0].RefusedHost != host {
		t.Fatalf("the cache plan's failed images: %+v, want base@1 refused at %q", plan.Failed, host)
	}

	ctx := sitesPage(t, reg)
	row := `#site-rack-a table.cache-failed tr.failed-image[data-ref="base@1"]`
	if got := text(t, ctx, row+" .reason"); got != proto.ReasonSourceNotAllowed {
		t.Errorf("the failed image's reason shows %q, want %s", got, proto.ReasonSourceNotAllowed)
	}
	if got := text(t, ctx, row+" .source"); got != "https://images.example.com/base-1.raw.zst" {
		t.Errorf("the failed image's source shows %q", got)
	}
	if got := text(t, ctx, row+" .refused-host"); got != host {
		t.Errorf("the refused host shows %q, want the text %q", got, host)
	}
	if got := text(t, ctx, row); !strings.Contains(got, "sites update rack-a --image-sources") {
		t.Errorf("the failed image's row says %q, not how to list the host", got)
	}
	title, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(row+" .refused-host"), "title"))
	if err != nil || title.Value != host {
		t.Errorf("the refused host's title is %q (%v), want %q", title.Value, err, host)
	}
	injected, err := chromedp.Run(ctx, chromedp.Evaluate[int]("document.querySelectorAll('img').length"))
	if err != nil || injected != 0 {
		t.Errorf("the page holds %d img element(s) (%v): the refused host was taken as markup", injected, err)
	}
	if pageTitle, err := chromedp.Run(ctx, chromedp.Title()); err != nil || strings.Contains(pageTitle, "injected") {
		t.Errorf("the page's title is %q (%v): the refused host's script ran", pageTitle, err)
	}
}

// sitesPage signs the platform's operator in to reg's console in a real Chromium and
// opens the Sites page, rack-a's section shown.
func sitesPage(t *testing.T, reg *testkit.Registry) context.Context {
	t.Helper()
	ctx := signedIn(t, reg, reg.AdminConfig)
	if err := chromedp.Do(ctx, chromedp.Navigate(reg.URL+"/ui/sites"), chromedp.WaitVisible(chromedp.ID("site-rack-a"))); err != nil {
		t.Fatalf("open the sites page: %v", err)
	}
	return ctx
}
