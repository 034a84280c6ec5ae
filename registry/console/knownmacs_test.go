package console_test

import (
	"fmt"
	"html"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/testkit"
)

// overBound is twoTenants' registry with more MACs enrolled at rack-a than a site knows:
// beta's flood after acme's node and its own, over the bound by over. The flood is
// written while the registry is down, in one store write, as sixteen thousand
// enrollments through the API would take minutes. It returns beta's nodes left out,
// enrolled last, in the order of their MACs, and the credential file of beta, holding
// compute:sites:manage.
func overBound(t *testing.T, over int) (reg *testkit.Registry, leftOut []api.LeftOutMAC, beta string) {
	reg, _, _, _ = twoTenants(t)
	beta = filepath.Join(t.TempDir(), "beta.conf")
	testkit.JSON(t, reg.AdminConfig, nil, "credentials", "create", "--tenant", "beta", "--actions", "compute:sites:manage,compute:nodes:read", "--out", beta)
	flood := proto.MaxKnownMACs - 2 + over // beside acme's node and beta's first
	reg = whileStopped(t, reg, func(tx *store.Tx) error {
		for i := range flood {
			n, err := tx.CreateNode(store.Node{Tenant: "beta", Pool: "gpu", MACs: []string{fmt.Sprintf("52:54:01:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff)}})
			if err != nil {
				return err
			}
			if i >= flood-over {
				leftOut = append(leftOut, api.LeftOutMAC{MAC: n.MACs[0], Tenant: "beta", Node: n.ID, Reason: proto.ReasonSiteShare})
			}
		}
		return nil
	})
	return reg, leftOut, beta
}

// whileStopped stops reg, writes fn to its store in one transaction and starts it again
// on the same data directory: what the test writes as no API call would (many rows at
// once, or what an agent reports).
func whileStopped(t *testing.T, reg *testkit.Registry, fn func(*store.Tx) error) *testkit.Registry {
	t.Helper()
	reg.Stop()
	// The floods are past the nodes a tenant holds by default: its operator raised the bound.
	st, err := store.Open(reg.DataDir, store.Options{Bounds: store.TenantBounds{Nodes: 2 * proto.MaxKnownMACs}})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Update(fn)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	return testkit.StartRegistry(t, reg.DataDir)
}

var (
	leftOutRow = regexp.MustCompile(`<tr><td><code>([^<]*)</code></td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td></tr>`)
	nextLink   = regexp.MustCompile(`<a id="next" href="([^"]+)"`)
)

// TestKnownMACsPage: with rack-a over the most MACs a site knows, the platform's
// operator follows the Sites page's link to rack-a's known MACs and pages through them
// two at a time: the page says how many the site knows and the bound, and its rows are
// exactly beta's MACs enrolled last, with their tenant, node and reason, in order, none
// twice. The page's path is not taken for a request on the site: the revocation's
// confirmation is still there.
//
// The attacker: beta, holding compute:sites:manage, signs in and asks for rack-a's known
// MACs and for a site that does not exist. Both answer the API's FORBIDDEN, the same
// page but for the site's name, naming no MAC and no node; its Sites page is the API's
// FORBIDDEN too, with no link to the page. Before the page, both paths were the
// console's NOT_FOUND for a request it does not know.
func TestKnownMACsPage(t *testing.T) {
	const over = 5
	reg, want, beta := overBound(t, over)
	t.Run("the platform pages through", func(t *testing.T) {
		admin := newClient(t, reg)
		admin.signIn(reg.AdminConfig)
		sites := admin.get("/ui/sites")
		link := `href="/ui/sites/rack-a/known-macs"`
		if sites.status != http.StatusOK || !strings.Contains(sites.body, link) {
			t.Fatalf("the operator's Sites page (%d) has no %s:\n%s", sites.status, link, sites.body)
		}
		var got []api.LeftOutMAC
		path := "/ui/sites/rack-a/known-macs?limit=2"
		for pages := 1; path != ""; pages++ {
			p := admin.get(path)
			if p.status != http.StatusOK || !strings.Contains(p.body, fmt.Sprintf(`<dd id="known">%d of at most %d</dd>`, proto.MaxKnownMACs, proto.MaxKnownMACs)) ||
				!strings.Contains(p.body, fmt.Sprintf(`<dd id="left-out-count">%d</dd>`, over)) {
				t.Fatalf("page %d, %s: %d\n%s", pages, path, p.status, p.body)
			}
			rows := leftOutRow.FindAllStringSubmatch(p.body, -1)
			if len(rows) == 0 || len(rows) > 2 {
				t.Fatalf("page %d, %s, of at most 2 shows %d rows:\n%s", pages, path, len(rows), p.body)
			}
			for _, r := range rows {
				got = append(got, api.LeftOutMAC{MAC: r[1], Tenant: r[2], Node: r[3], Reason: r[4]})
			}
			path = ""
			if m := nextLink.FindStringSubmatch(p.body); m != nil {
				path = html.UnescapeString(m[1])
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("the pages show\n%+v\nwant beta's %d enrolled last, by MAC:\n%+v", got, over, want)
		}
		if p := admin.get("/ui/sites/rack-a/known-macs?limit=x"); p.status != http.StatusBadRequest || !strings.Contains(p.body, "INVALID_INPUT") || !strings.Contains(p.body, "at limit") {
			t.Errorf("a limit that is not a number: %d\n%s", p.status, p.body)
		}
		if p := admin.get("/ui/sites/rack-a/revoke-certificates"); p.status != http.StatusOK || !strings.Contains(p.body, `id="confirm"`) {
			t.Errorf("the revocation's confirmation beside the known MACs' page: %d\n%s", p.status, p.body)
		}
	})
	t.Run("beta is refused", func(t *testing.T) {
		attacker := newClient(t, reg)
		attacker.signIn(beta)
		theirs, none := attacker.get("/ui/sites/rack-a/known-macs"), attacker.get("/ui/sites/rack-9/known-macs")
		if theirs.status != http.StatusForbidden || !strings.Contains(theirs.body, string(proto.Forbidden)) || theirs.status != none.status ||
			strings.ReplaceAll(theirs.body, "rack-a", "SITE") != strings.ReplaceAll(none.body, "rack-9", "SITE") {
			t.Errorf("beta: rack-a's known MACs answer %d\n%s\nand a site that does not exist %d\n%s", theirs.status, theirs.body, none.status, none.body)
		}
		if strings.Contains(theirs.body, "52:54:") || strings.Contains(theirs.body, "nd_") {
			t.Errorf("beta's refused known MACs of rack-a name the site's machines:\n%s", theirs.body)
		}
		if p := attacker.get("/ui/sites"); p.status != http.StatusForbidden || strings.Contains(p.body, "known-macs") {
			t.Errorf("beta's Sites page: %d\n%s", p.status, p.body)
		}
	})
}

// TestSitesPageShowsAPageOfTheCache: a site whose cache holds more images than a page
// shows the first page on the Sites page, by digest, and the `sites locations`
// command with the cursor that lists the next. Before, the page asked for the site's
// whole list at once, and showed it.
func TestSitesPageShowsAPageOfTheCache(t *testing.T) {
	const held = 101 // one more than the page the console asks for
	reg, _, _, _ := twoTenants(t)
	var ids []string
	reg = whileStopped(t, reg, func(tx *store.Tx) (err error) { ids, err = storetest.Located(tx, "rack-a", held); return err })
	admin := newClient(t, reg)
	admin.signIn(reg.AdminConfig)
	p := admin.get("/ui/sites")
	var shown []string
	for _, m := range locationRow.FindAllStringSubmatch(p.body, -1) {
		shown = append(shown, m[1])
	}
	if p.status != http.StatusOK || !slices.Equal(shown, ids[:held-1]) || !strings.Contains(p.body, "<code>sites locations rack-a --cursor ") {
		t.Errorf("the Sites page (%d) shows %d of the %d images rack-a's cache holds, want the first %d by digest and the command that lists the next:\n%s", p.status, len(shown), held, held-1, p.body)
	}
}

var locationRow = regexp.MustCompile(`<tr class="location" data-image="([^"]+)">`)
