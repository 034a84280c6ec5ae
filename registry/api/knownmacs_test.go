package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// TestSitesKnownMACs: beta floods acme's site with more machines than a site knows;
// the platform sees, over HTTP and page by page, how many the site knows, the bound,
// and each MAC left out with its tenant, node and reason: beta's enrolled last, none of
// acme's. beta, holding compute:sites:manage, asking for the site's list (or an
// unknown site's) is refused FORBIDDEN, and learns nothing of the site's machines.
func TestSitesKnownMACs(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// beta's flood is past the nodes a tenant holds by default: its operator raised the bound.
	st := storetest.Filled(t, store.Options{Now: func() time.Time { at = at.Add(time.Second); return at }, Bounds: store.TenantBounds{Nodes: 2 * proto.MaxKnownMACs}})
	var root, beta string
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		for _, tenant := range []string{store.RootTenant, "beta"} {
			if _, err := tx.CreateTenant(tenant); err != nil {
				return err
			}
		}
		if _, err := tx.CreatePool(store.Pool{Tenant: "beta", Name: "flood", Site: storetest.Site}); err != nil {
			return err
		}
		if _, root, err = tx.CreateCredential(store.RootTenant, []string{ActionSitesManage}, time.Now().Add(time.Hour)); err != nil {
			return err
		}
		_, beta, err = tx.CreateCredential("beta", []string{ActionSitesManage, ActionNodesRead}, time.Now().Add(time.Hour))
		return err
	})
	mac := func(b, n int) string {
		return fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", b, n>>16&0xff, n>>8&0xff, n&0xff)
	}
	for i := range 3 {
		storetest.Node(t, st, store.Node{MACs: []string{mac(0, i)}}) // acme's
	}
	const flood, over = proto.MaxKnownMACs + 5, 8 // beta's machines; the site's MACs over the bound
	var floodIDs []string
	for from := 0; from < flood; from += 4096 {
		storetest.Update(t, st, func(tx *store.Tx) error {
			for i := from; i < min(from+4096, flood); i++ {
				n, err := tx.CreateNode(store.Node{Tenant: "beta", Pool: "flood", MACs: []string{mac(1, i)}})
				if err != nil {
					return err
				}
				floodIDs = append(floodIDs, n.ID)
			}
			return nil
		})
	}
	s := NewServer(st, slog.New(slog.DiscardHandler))
	s.RegisterAll()
	srv := httptest.NewServer(s)
	defer srv.Close()
	client := func(secret string) *Client { return &Client{base: srv.URL, bearer: secret, http: srv.Client()} }
	ctx := context.Background()

	var got []LeftOutMAC
	req := KnownMACsRequest{SiteID: storetest.Site, ListRequest: ListRequest{Limit: 3}}
	for pages := 1; ; pages++ {
		var out KnownMACs
		if err := client(root).Call(ctx, "sites.knownMacs", req, &out); err != nil {
			t.Fatal(err)
		}
		if out.Site != storetest.Site || out.Known != proto.MaxKnownMACs || out.Max != proto.MaxKnownMACs || out.LeftOutCount != over || len(out.LeftOut) > 3 {
			t.Fatalf("page %d: %+v, want %d known of at most %d, %d left out, at most 3 a page", pages, out, proto.MaxKnownMACs, proto.MaxKnownMACs, over)
		}
		got = append(got, out.LeftOut...)
		if out.NextCursor == "" {
			break
		}
		req.Cursor = out.NextCursor
	}
	var want []LeftOutMAC
	for i := flood - over; i < flood; i++ {
		want = append(want, LeftOutMAC{MAC: mac(1, i), Tenant: "beta", Node: floodIDs[i], Reason: proto.ReasonSiteShare})
	}
	if !slices.Equal(got, want) {
		t.Errorf("left out %+v, want beta's last %d by MAC: %+v", got, over, want)
	}
	var out KnownMACs
	if err := client(root).Call(ctx, "sites.knownMacs", KnownMACsRequest{SiteID: storetest.Site, ListRequest: ListRequest{Cursor: "not a cursor"}}, &out); err == nil || proto.AsError(err).Details.Path != "cursor" {
		t.Errorf("a cursor the list did not return: %v, want INVALID_INPUT at cursor", err)
	}

	// The attacker: beta asks for acme's site's list, and for a site that does not exist.
	for _, site := range []string{storetest.Site, "rack-9"} {
		var raw json.RawMessage
		err := client(beta).Call(ctx, "sites.knownMacs", KnownMACsRequest{SiteID: site}, &raw)
		if proto.CodeOf(err) != proto.Forbidden {
			t.Errorf("beta: sites.knownMacs of %s: %v %s, want FORBIDDEN", site, err, raw)
		}
		if len(raw) != 0 || strings.Contains(fmt.Sprint(err), "52:54:") || strings.Contains(fmt.Sprint(err), "nd_") {
			t.Errorf("beta's refused sites.knownMacs of %s tells the site's machines: %s %v", site, raw, err)
		}
	}
}
