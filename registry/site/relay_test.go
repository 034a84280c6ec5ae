package site

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// Tenant beta knows the digest of acme's image cached at rack-a (a digest is no
// secret), registers an image of its own with it and its size, naming a source of its
// own: the site's cache verified acme's source only, so beta's image has no location and
// its deploys get no cache URL, while acme's image is served from the cache.
func TestCachedCopyServesOnlyTheSourceItWasVerifiedFrom(t *testing.T) {
	st := openStore(t)
	digest := strings.Repeat("ab", 32)
	const httpBase = "http://10.0.0.1:8080"
	acmeSource, betaSource := "https://images.acme.example/secret.raw", "https://images.beta.example/mine.raw"
	var acme, beta store.Image
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		if _, err := tx.CreateTenant("beta"); err != nil {
			return err
		}
		req := image.RegisterRequest{Ref: "secret@1", Format: proto.FormatRaw, Compression: proto.CompressionNone, SHA256: digest, SizeBytes: new(int64(1 << 30)), Source: acmeSource}
		if acme, err = image.Register(tx, image.Allowlist{}, storetest.Tenant, req); err != nil {
			return err
		}
		req.Ref, req.Source = "mine@1", betaSource
		if beta, err = image.Register(tx, image.Allowlist{}, "beta", req); err != nil {
			return err
		}
		return nil
	})
	report := func(t *testing.T, entries []proto.ImageCacheEntry) {
		t.Helper()
		storetest.Update(t, st, func(tx *store.Tx) error {
			si, _ := json.Marshal(proto.SiteInventory{HTTPBase: httpBase})
			if _, err := tx.PutInventory(Agent(storetest.Site), proto.SectionSite, si); err != nil {
				return err
			}
			images, _ := json.Marshal(entries)
			if _, err := tx.PutInventory(Agent(storetest.Site), proto.SectionImages, images); err != nil {
				return err
			}
			return recordCacheReport(tx, Agent(storetest.Site))
		})
	}
	urls := func(t *testing.T) (acmeURL, betaURL string) {
		t.Helper()
		err := st.View(func(tx *store.Tx) (err error) {
			if acmeURL, err = CacheURL(tx, storetest.Site, acme.ID, digest); err != nil {
				return err
			}
			betaURL, err = CacheURL(tx, storetest.Site, beta.ID, digest)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return acmeURL, betaURL
	}
	want := httpBase + "/images/sha256/" + digest

	report(t, []proto.ImageCacheEntry{{Digest: digest, State: proto.CacheReady, SizeBytes: 1 << 30, Sources: []string{acmeSource}}})
	if a, b := urls(t); a != want || b != "" {
		t.Fatalf("cache URLs: acme %q, beta %q; want acme %q, beta none", a, b, want)
	}
	st.View(func(tx *store.Tx) error {
		if _, err := tx.ImageLocation(storetest.Site, beta.ID); proto.CodeOf(err) != proto.NotFound {
			t.Errorf("beta's image has a location at %s: %v", storetest.Site, err)
		}
		return nil
	})

	// The cache pulled beta's source too and its bytes matched: beta gets nothing new.
	report(t, []proto.ImageCacheEntry{{Digest: digest, State: proto.CacheReady, SizeBytes: 1 << 30, Sources: []string{acmeSource, betaSource}}})
	if a, b := urls(t); a != want || b != want {
		t.Fatalf("cache URLs with both sources verified: acme %q, beta %q; want %q", a, b, want)
	}

	// A site agent from before sources were kept: no image of the digest is served.
	report(t, []proto.ImageCacheEntry{{Digest: digest, State: proto.CacheReady, SizeBytes: 1 << 30}})
	if a, b := urls(t); a != "" || b != "" {
		t.Fatalf("cache URLs from a report without sources: acme %q, beta %q; want none", a, b)
	}
}

// TestSiteCommandNamesItsTenant: a site command names the tenant whose machine it acts
// on, whose share of the site agent's command slots it counts against.
func TestSiteCommandNamesItsTenant(t *testing.T) {
	st := openStore(t)
	n := storetest.Node(t, st, store.Node{MACs: []string{"52:54:00:00:00:01"}})
	var (
		payload json.RawMessage
		tenant  string
	)
	err := st.View(func(tx *store.Tx) (err error) {
		payload, tenant, err = Command(tx, n.ID, "", "", proto.CommandSetPower, json.RawMessage(`{"action":"on"}`))
		return err
	})
	var cmd proto.SiteCommand
	if err == nil {
		err = json.Unmarshal(payload, &cmd)
	}
	if err != nil || tenant != n.Tenant || cmd.Node != n.ID {
		t.Fatalf("Command = %s for tenant %q, %v; want node %s, tenant %q", payload, tenant, err, n.ID, n.Tenant)
	}
}

// A site cuts its `images` section to fit its frame, and beta's many images take the
// place of acme's in it: the registry, told by the `site` section that the report is
// cut, keeps acme's image at the site, and drops it only from a whole report.
func TestACutCacheReportKeepsTheImagesItLeavesOut(t *testing.T) {
	st := openStore(t)
	digest := strings.Repeat("cd", 32)
	const httpBase, source = "http://10.0.0.1:8080", "https://images.acme.example/secret.raw"
	var acme store.Image
	storetest.Update(t, st, func(tx *store.Tx) (err error) {
		req := image.RegisterRequest{Ref: "secret@1", Format: proto.FormatRaw, Compression: proto.CompressionNone, SHA256: digest, SizeBytes: new(int64(1)), Source: source}
		acme, err = image.Register(tx, image.Allowlist{}, storetest.Tenant, req)
		return err
	})
	report := func(t *testing.T, omitted int, entries ...proto.ImageCacheEntry) string {
		t.Helper()
		var url string
		storetest.Update(t, st, func(tx *store.Tx) error {
			si, _ := json.Marshal(proto.SiteInventory{HTTPBase: httpBase, Omitted: map[string]int{proto.SectionImages: omitted}})
			images, _ := json.Marshal(append([]proto.ImageCacheEntry{}, entries...))
			for section, data := range map[string][]byte{proto.SectionSite: si, proto.SectionImages: images} {
				if _, err := tx.PutInventory(Agent(storetest.Site), section, data); err != nil {
					return err
				}
			}
			if err := recordCacheReport(tx, Agent(storetest.Site)); err != nil {
				return err
			}
			var err error
			url, err = CacheURL(tx, storetest.Site, acme.ID, digest)
			return err
		})
		return url
	}
	want := httpBase + "/images/sha256/" + digest
	if url := report(t, 0, proto.ImageCacheEntry{Digest: digest, State: proto.CacheReady, SizeBytes: 1, Sources: []string{source}}); url != want {
		t.Fatalf("acme's cache URL %q, want %q", url, want)
	}
	if url := report(t, 1); url != want {
		t.Fatalf("acme's cache URL after a cut report that leaves it out: %q, want %q", url, want)
	}
	if url := report(t, 0); url != "" {
		t.Fatalf("acme's cache URL after a whole report without it: %q, want none", url)
	}
}
