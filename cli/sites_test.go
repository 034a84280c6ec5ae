package cli_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
)

// A site's caches pull only from the hosts its image sources allow, narrowed by a pool's
// policy.imageSources; a site without any pre-warms nothing. Only the platform sets them.
func TestSiteImageSources(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	platform := openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "root", "--id", "platform-2026", "--public-key", platform.PublicPath)
	var base imageOut
	testkit.JSON(t, admin, &base, "images", "register", "--tenant", "root", "--ref", "base@1", "--source", "https://images.example.com/base-1.raw.zst",
		"--disk-format", "raw", "--compression", "zstd", "--sha256", artifactDigest, "--size", "1048576",
		"--signer", "platform-2026", "--signature", signShell(t, platform, "os", "base@1", "raw", "zstd", artifactDigest))
	testkit.JSON(t, admin, nil, "images", "promote", base.ID)
	acme := tenantConf(t, admin, "acme", "compute:pools:manage,compute:sites:manage")

	if e := testkit.Fails(t, admin, "sites", "create", "rack-1", "--image-sources", "images.example.com,https://internal"); e.Code != "INVALID_INPUT" || e.Details.Path != "imageSources[1]" {
		t.Errorf("a bad pattern: %+v", e)
	}
	var sites struct{ Sites []api.Site }
	testkit.JSON(t, admin, &sites, "sites", "list")
	if len(sites.Sites) != 0 {
		t.Fatalf("a refused site was stored: %+v", sites)
	}
	if res := testkit.CLI(t, admin, "sites", "create", "rack-1"); res.Code != 0 || !strings.Contains(res.Stdout, "none: its caches pull no image") {
		t.Fatalf("sites create: %d %s %s", res.Code, res.Stdout, res.Stderr)
	}
	testkit.JSON(t, acme, nil, "pools", "create", "gpu", "--site", "rack-1", "--prewarm", "base@1")
	type planOut struct {
		CacheImages []struct{ Ref string }
		Excluded    []struct{ Ref, Reason, Message string }
	}
	plan := func() planOut {
		var p planOut
		testkit.JSON(t, admin, &p, "sites", "cache-plan", "rack-1")
		return p
	}
	if p := plan(); len(p.CacheImages) != 0 || len(p.Excluded) != 1 || p.Excluded[0].Reason != "source-not-allowed" || !strings.Contains(p.Excluded[0].Message, "sites update rack-1") {
		t.Errorf("a site without image sources: %+v", p)
	}

	// Only the platform changes a site; bad input changes nothing.
	if e := testkit.Fails(t, acme, "sites", "update", "rack-1", "--image-sources", "images.example.com"); e.Code != "FORBIDDEN" {
		t.Errorf("a tenant widening the site's image sources: %+v", e)
	}
	for args, path := range map[string]string{
		"rack-9 --image-sources images.example.com": "siteId",
		"rack-1":                   "", // nothing to change
		"rack-1 --image-sources *": "imageSources[0]",
	} {
		if e := testkit.Fails(t, admin, append([]string{"sites", "update"}, strings.Fields(args)...)...); e.Details.Path != path {
			t.Errorf("sites update %s: %+v, want an error at %s", args, e, path)
		}
	}
	if p := plan(); len(p.CacheImages) != 0 {
		t.Errorf("a refused update changed the plan: %+v", p)
	}
	var site api.Site
	testkit.JSON(t, admin, &site, "sites", "update", "rack-1", "--image-sources", "images.example.com,*.corp.example:5000")
	if len(site.ImageSources) != 2 {
		t.Errorf("updated %+v", site)
	}
	if p := plan(); len(p.CacheImages) != 1 || len(p.Excluded) != 0 {
		t.Errorf("after allowing images.example.com: %+v", p)
	}

	// A pool narrows the site's list; it cannot widen it.
	if e := testkit.Fails(t, acme, "pools", "update", "gpu", "--policy", writeDoc(t, `{"imageSources": ["images.example.com:99999"]}`)); e.Code != "INVALID_INPUT" || e.Details.Path != "policy.imageSources[0]" {
		t.Errorf("a bad pool pattern: %+v", e)
	}
	testkit.JSON(t, acme, nil, "pools", "update", "gpu", "--policy", writeDoc(t, `{"prewarmImages": ["base@1"], "imageSources": ["mirror.corp.example:5000", "evil.example"]}`))
	if p := plan(); len(p.CacheImages) != 0 || len(p.Excluded) != 1 || !strings.Contains(p.Excluded[0].Message, "pool gpu") {
		t.Errorf("a pool narrowing the sources: %+v", p)
	}
	testkit.JSON(t, admin, nil, "sites", "update", "rack-1", "--image-sources", "")
	if p := plan(); len(p.CacheImages) != 0 || len(p.Excluded) != 1 {
		t.Errorf("after clearing the site's sources: %+v", p)
	}
}

// TestSitesRevokeIdentity: only the platform revokes a site agent's certificates: a
// tenant's credential that may manage sites is FORBIDDEN and moves nothing; the admin's
// moves the site's identity epoch, deletes its unused site token and says how the agent
// joins again; an unknown site is NOT_FOUND at siteId, a reason too long INVALID_INPUT
// at reason. A site token admits only the site's own agent.
func TestSitesRevokeIdentity(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a")
	acme := tenantConf(t, admin, "acme", "compute:sites:manage,compute:tokens:manage")
	testkit.JSON(t, admin, nil, "tokens", "create", "--kind", "site", "--site", "rack-a")

	if e := testkit.Fails(t, acme, "sites", "revoke-identity", "rack-a"); e.Code != "FORBIDDEN" {
		t.Errorf("a tenant revoking the site's agent: %+v, want FORBIDDEN", e)
	}
	if e := testkit.Fails(t, admin, "sites", "revoke-identity", "rack-z"); e.Code != "NOT_FOUND" || e.Details.Path != "siteId" {
		t.Errorf("an unknown site: %+v, want NOT_FOUND at siteId", e)
	}
	if e := testkit.Fails(t, admin, "sites", "revoke-identity", "rack-a", "--reason", strings.Repeat("x", 257)); e.Code != "INVALID_INPUT" || e.Details.Path != "reason" {
		t.Errorf("a reason of 257 bytes: %+v, want INVALID_INPUT at reason", e)
	}
	var out api.CertificatesRevoked
	testkit.JSON(t, admin, &out, "sites", "revoke-identity", "rack-a", "--reason", "rack server stolen")
	if out.SiteID != "rack-a" || out.IdentityEpoch != 1 || out.Reason != "rack server stolen" || out.JoinTokensDeleted != 1 {
		t.Errorf("sites revoke-identity: %+v, want rack-a at epoch 1 (the tenant's and the refused tries moved nothing), its one unused token deleted", out)
	}
	res := testkit.CLI(t, admin, "sites", "revoke-identity", "rack-a")
	for _, want := range []string{"site rack-a's agent", "identity epoch now 2", "reason: an operator asked", "tokens create --kind site --site rack-a"} {
		if res.Code != 0 || !strings.Contains(res.Stdout, want) {
			t.Errorf("sites revoke-identity: exit %d, want %q in\n%s%s", res.Code, want, res.Stdout, res.Stderr)
		}
	}
	var sites api.SiteList
	if testkit.JSON(t, admin, &sites, "sites", "list"); len(sites.Sites) != 1 || sites.Sites[0].IdentityEpoch != 2 ||
		sites.Sites[0].AgentRevoked == nil || sites.Sites[0].AgentRevoked.Reason != "an operator asked" {
		t.Errorf("sites list shows %+v, want rack-a at identity epoch 2, its last revocation's reason", sites.Sites)
	}
	if text := testkit.CLI(t, admin, "sites", "list").Stdout; !strings.Contains(text, "REVOKED") || !strings.Contains(text, "(epoch 2)") {
		t.Errorf("sites list does not show the revocation:\n%s", text)
	}
	if e := testkit.Fails(t, admin, "tokens", "create", "--kind", "site", "--site", "rack-a", "--node-id", "rack-a-2"); e.Code != "INVALID_INPUT" || e.Details.Path != "nodeId" {
		t.Errorf("a site token for another node id: %+v, want INVALID_INPUT at nodeId", e)
	}
}

// TestSitesKnownMACs: with beta's machines at rack-a over the most a site knows, `sites
// known-macs` shows the platform how many the site knows, the bound and beta's MACs
// enrolled last, left out with their node and reason, as a table and as JSON, a page at
// a time; beta's own credential is refused.
func TestSitesKnownMACs(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a")
	testkit.JSON(t, admin, nil, "tenants", "create", "beta")
	reg.Stop()

	// Enrolled while the registry is down, as many as one store write takes, past the
	// nodes a tenant holds by default (a registry whose operator raised the bound).
	const flood = proto.MaxKnownMACs + 2
	st, err := store.Open(reg.DataDir, store.Options{Bounds: store.TenantBounds{Nodes: flood}})
	if err != nil {
		t.Fatal(err)
	}
	mac := func(n int) string { return fmt.Sprintf("52:54:01:%02x:%02x:%02x", n>>16&0xff, n>>8&0xff, n&0xff) }
	var last []store.Node // beta's two enrolled last
	err = st.Update(func(tx *store.Tx) error {
		if _, err := tx.CreatePool(store.Pool{Tenant: "beta", Name: "flood", Site: "rack-a"}); err != nil {
			return err
		}
		for i := range flood {
			n, err := tx.CreateNode(store.Node{Tenant: "beta", Pool: "flood", MACs: []string{mac(i)}})
			if err != nil {
				return err
			}
			if i >= flood-2 {
				last = append(last, n)
			}
		}
		return nil
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	testkit.StartRegistry(t, reg.DataDir)
	beta := filepath.Join(t.TempDir(), "beta.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "beta", "--actions", "compute:sites:manage", "--out", beta)

	res := testkit.CLI(t, admin, "sites", "known-macs", "rack-a", "--limit", "1")
	want := []string{"KNOWN", "16384", "LEFT OUT", last[0].MACs[0], "beta", last[0].ID, "site-share", "--cursor"}
	for _, w := range want {
		if res.Code != 0 || !strings.Contains(res.Stdout, w) {
			t.Errorf("sites known-macs, a page of one, shows no %q: %d\n%s%s", w, res.Code, res.Stdout, res.Stderr)
		}
	}
	if strings.Contains(res.Stdout, last[1].ID) {
		t.Errorf("a page of one shows two:\n%s", res.Stdout)
	}
	var page api.KnownMACs
	testkit.JSON(t, admin, &page, "sites", "known-macs", "rack-a", "--limit", "1")
	wantPage := []api.LeftOutMAC{{MAC: last[0].MACs[0], Tenant: "beta", Node: last[0].ID, Reason: "site-share"}}
	if page.Known != proto.MaxKnownMACs || page.Max != proto.MaxKnownMACs || page.LeftOutCount != 2 || !slices.Equal(page.LeftOut, wantPage) || page.NextCursor == "" {
		t.Errorf("the first page as JSON: %+v, want %+v and a cursor", page, wantPage)
	}
	cursor := page.NextCursor
	page = api.KnownMACs{}
	testkit.JSON(t, admin, &page, "sites", "known-macs", "rack-a", "--cursor", cursor)
	if wantPage[0] = (api.LeftOutMAC{MAC: last[1].MACs[0], Tenant: "beta", Node: last[1].ID, Reason: "site-share"}); !slices.Equal(page.LeftOut, wantPage) || page.NextCursor != "" {
		t.Errorf("the second page: %+v, want %+v and no cursor", page, wantPage)
	}
	if e := testkit.Fails(t, beta, "sites", "known-macs", "rack-a"); e.Code != "FORBIDDEN" {
		t.Errorf("beta asking for rack-a's known MACs: %+v, want FORBIDDEN", e)
	}
}

// TestSitesLocationsPage: `sites locations` shows a page of the site's images at a time,
// by digest, with the --cursor of the next while more follow, in the table and as
// JSON (nextCursor); --cursor resumes after it. Before, it showed the whole list.
func TestSitesLocationsPage(t *testing.T) {
	reg := testkit.StartRegistry(t, "")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a")
	reg.Stop()
	st, err := store.Open(reg.DataDir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	err = st.Update(func(tx *store.Tx) (err error) { ids, err = storetest.Located(tx, "rack-a", 2); return err })
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	testkit.StartRegistry(t, reg.DataDir)

	res := testkit.CLI(t, admin, "sites", "locations", "rack-a", "--limit", "1")
	if res.Code != 0 || !strings.Contains(res.Stdout, ids[0]) || strings.Contains(res.Stdout, ids[1]) || !strings.Contains(res.Stdout, "--cursor") {
		t.Errorf("sites locations, a page of one: exit %d, want %s alone and the --cursor of the next\n%s%s", res.Code, ids[0], res.Stdout, res.Stderr)
	}
	var page api.SiteLocations
	testkit.JSON(t, admin, &page, "sites", "locations", "rack-a", "--limit", "1")
	if len(page.Locations) != 1 || page.Locations[0].ImageID != ids[0] || page.NextCursor == "" {
		t.Fatalf("the first page as JSON: %+v, want %s and a cursor", page, ids[0])
	}
	cursor := page.NextCursor
	page = api.SiteLocations{}
	testkit.JSON(t, admin, &page, "sites", "locations", "rack-a", "--cursor", cursor)
	if len(page.Locations) != 1 || page.Locations[0].ImageID != ids[1] || page.NextCursor != "" {
		t.Errorf("the second page: %+v, want %s and no cursor", page, ids[1])
	}
}
