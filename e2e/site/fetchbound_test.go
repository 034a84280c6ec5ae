package site

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/fetch/fetchtest"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
)

// TestSiteCacheFetchesOnlyWithinItsImageSources: the platform allows rack-a to fetch
// from one host, and from one name. A source on the allowed host then sends the site's
// cache on to a host inside the platform's network the site does not allow (another
// loopback port here, counting its connections, that would serve the image and a
// token): one image's source by a redirect (with a presigned secret in its query), an
// OCI image's by the realm of its token challenge. The allowed name resolves to a
// loopback address (localhost, by the host's own resolver). Before, the real site agent
// followed each: it connected to the internal host and to the loopback address, and the
// images became ready at rack-a. Now it connects to neither, each image fails with
// nothing written, the log names the refused host and why, and an image of the allowed
// host itself is pulled as before.
//
// The operator then sees, in `sites locations` and `sites cache-plan` (text and JSON),
// each refused image's reason, source-not-allowed, and the host it was refused at, never
// the redirect's query; and lists the internal host (the registry's storage, say) with
// `sites update`. The site's cache retries a failed pull only after an hour here, yet
// the two images refused for that host are pulled from it at once and become ready.
// Before, the reason was only in the site agent's log, and the images stayed failed
// until the retry interval passed.
func TestSiteCacheFetchesOnlyWithinItsImageSources(t *testing.T) {
	work := t.TempDir()
	arts := map[string][]byte{}
	for _, name := range []string{"direct", "redirect", "realm", "named"} {
		arts[name] = make([]byte, 256<<10)
		rand.Read(arts[name])
	}
	realmBlob := "/v2/os/ubuntu/blobs/sha256:" + testkit.Digest(arts["realm"])

	// internal would serve the image and a token to whoever connects.
	internal := fetchtest.NewCounted(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/token":
			fmt.Fprint(w, `{"token": "t"}`)
		case "/latest/meta-data":
			w.Write(arts["redirect"])
		default:
			http.NotFound(w, r)
		}
	}))

	// source is the host the site allows.
	sourcePEM := filepath.Join(work, "source.pem")
	source := testkit.ServeTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/direct.raw":
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(arts["direct"]))
		case r.URL.Path == "/redirect.raw":
			http.Redirect(w, r, internal.URL+"/latest/meta-data?X-Amz-Signature=presigned-secret", http.StatusFound)
		case r.URL.Path == realmBlob && r.Header.Get("Authorization") != "Bearer t":
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+internal.URL+`/token",service="registry"`)
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.Path == realmBlob:
			w.Write(arts["realm"])
		default:
			http.NotFound(w, r)
		}
	}), sourcePEM)

	// named is on loopback, reached by the name localhost, with a certificate for it.
	ca, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.ServerCertificate()
	if err != nil {
		t.Fatal(err)
	}
	named := fetchtest.NewCounted(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(arts["named"]) }), cert)
	namedPort := named.Port()

	caPEM, _, err := ca.PEM()
	if err != nil {
		t.Fatal(err)
	}
	sourceCA, err := os.ReadFile(sourcePEM)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(work, "source-ca.pem")
	testkit.WriteFile(t, caFile, append(sourceCA, caPEM...), 0o644)

	reg := testkit.StartRegistry(t, t.TempDir(), "--agent-listen", "127.0.0.1:0")
	admin := reg.AdminConfig
	key := openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "root", "--id", "platform", "--public-key", key.PublicPath)
	sourceHost := source.Listener.Addr().String()
	sources := map[string]string{
		"direct":   source.URL + "/direct.raw",
		"redirect": source.URL + "/redirect.raw",
		"realm":    "oci://" + sourceHost + "/os/ubuntu@sha256:" + testkit.Digest(arts["realm"]),
		"named":    "https://localhost:" + namedPort + "/named.raw",
	}
	var refs []string
	for name, src := range sources {
		testkit.RegisterImage(t, admin, testkit.Image{Tenant: "root", Ref: name + "@1", Kind: "os", Source: src, Format: "raw",
			Compression: "none", SHA256: testkit.Digest(arts[name]), Size: int64(len(arts[name])), SignerID: "platform", Signer: key}, nil)
		refs = append(refs, name+"@1")
	}
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--image-sources", sourceHost+",localhost:"+namedPort)
	testkit.JSON(t, admin, nil, "pools", "create", "prewarm", "--site", "rack-a", "--tenant", "root", "--prewarm", strings.Join(refs, ","))
	var plan api.CachePlan
	testkit.JSON(t, admin, &plan, "sites", "cache-plan", "rack-a")
	if len(plan.CacheImages) != 4 {
		t.Fatalf("cache plan %+v: want the four images, each of a source the site allows", plan)
	}

	sa := startSiteAgent(t, reg, work, map[string]any{"dir": filepath.Join(work, "cache"), "caFile": caFile, "retryInterval": "1h"})
	states := func() map[string]proto.ImageCacheState {
		var inv struct{ Sections []api.InventorySection }
		testkit.JSON(t, admin, &inv, "sites", "inventory", "rack-a")
		out := map[string]proto.ImageCacheState{}
		for _, s := range inv.Sections {
			if s.Section != proto.SectionImages {
				continue
			}
			var list []proto.ImageCacheEntry
			json.Unmarshal(s.Data, &list)
			for _, e := range list {
				for name, a := range arts {
					if e.Digest == testkit.Digest(a) {
						out[name] = e.State
					}
				}
			}
		}
		return out
	}
	waitFor(t, "the direct image ready and the others ended", func() bool {
		at := states()
		return at["direct"] == proto.CacheReady && at["redirect"] != "" && at["redirect"] != proto.CachePulling &&
			at["realm"] != "" && at["realm"] != proto.CachePulling && at["named"] != "" && at["named"] != proto.CachePulling
	})
	at := states()
	for _, name := range []string{"redirect", "realm", "named"} {
		if at[name] != proto.CacheFailed {
			t.Errorf("%s@1 is %s at rack-a, want failed", name, at[name])
		}
		if _, err := os.Stat(filepath.Join(work, "cache", "sha256", testkit.Digest(arts[name]))); !os.IsNotExist(err) {
			t.Errorf("%s@1 was written to the cache: %v", name, err)
		}
	}
	if n := internal.Conns(); n != 0 {
		t.Errorf("%d connections to the internal host the allowed source sent the site to", n)
	}
	if n := named.Conns(); n != 0 {
		t.Errorf("%d connections to the loopback address the allowed name resolved to", n)
	}
	internalHost := internal.Host()
	log := sa.log()
	for _, want := range []string{
		"refused=redirect host=" + internalHost,
		"refused=\"token realm\" host=" + internalHost,
		"refused=address host=localhost:" + namedPort,
		"a loopback address host localhost resolves to",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the site agent's log does not say %q", want)
		}
	}

	// The operator is shown why, and where: the host the site's image sources lack, for
	// the name that led to a loopback address that address (which only a pattern naming
	// it allows).
	refusedAt := map[string]string{"redirect": internalHost, "realm": internalHost, "named": named.Host()}
	var locs api.SiteLocations
	testkit.JSON(t, admin, &locs, "sites", "locations", "rack-a")
	located := map[string]api.ImageLocation{}
	for _, l := range locs.Locations {
		located[l.Digest] = l
	}
	testkit.JSON(t, admin, &plan, "sites", "cache-plan", "rack-a")
	failed := map[string]api.FailedImage{}
	for _, f := range plan.Failed {
		failed[f.Digest] = f
	}
	if len(plan.Failed) != len(refusedAt) {
		t.Errorf("sites cache-plan lists %d images failed at the site, want %d: %+v", len(plan.Failed), len(refusedAt), plan.Failed)
	}
	for name, host := range refusedAt {
		d := testkit.Digest(arts[name])
		if l := located[d]; l.State != proto.CacheFailed || l.Reason != proto.ReasonSourceNotAllowed || l.RefusedHost != host {
			t.Errorf("sites locations shows %s@1 %s, reason %q, refused host %q; want failed, %s, %s", name, l.State, l.Reason, l.RefusedHost, proto.ReasonSourceNotAllowed, host)
		}
		if f := failed[d]; f.Reason != proto.ReasonSourceNotAllowed || f.RefusedHost != host {
			t.Errorf("sites cache-plan shows %s@1 failed with reason %q, refused host %q; want %s, %s", name, f.Reason, f.RefusedHost, proto.ReasonSourceNotAllowed, host)
		}
	}
	for _, args := range [][]string{{"sites", "locations", "rack-a"}, {"sites", "cache-plan", "rack-a"}} {
		for _, format := range []string{"table", "json"} {
			res := testkit.CLI(t, admin, append(args, "--format", format)...)
			if res.Code != 0 {
				t.Fatalf("%v: exit %d: %s", args, res.Code, res.Stderr)
			}
			if strings.Contains(res.Stdout, "presigned-secret") {
				t.Errorf("%v --format %s shows the refused redirect's query:\n%s", args, format, res.Stdout)
			}
			if format != "table" {
				continue
			}
			for name, host := range refusedAt {
				if !hasLine(res.Stdout, testkit.Digest(arts[name]), proto.ReasonSourceNotAllowed, host) {
					t.Errorf("%v does not show %s@1 refused at %s:\n%s", args, name, host, res.Stdout)
				}
			}
		}
	}

	// The operator lists the internal host: the images refused for it are pulled from it
	// at once, not after the hour the site's cache waits to retry a failed pull.
	testkit.JSON(t, admin, nil, "sites", "update", "rack-a", "--image-sources", sourceHost+",localhost:"+namedPort+","+internalHost)
	waitFor(t, "the images refused for the internal host ready once it is listed", func() bool {
		at := states()
		return at["redirect"] == proto.CacheReady && at["realm"] == proto.CacheReady
	})
	if internal.Conns() == 0 {
		t.Error("the images became ready without a connection to the host listed")
	}
	testkit.JSON(t, admin, &plan, "sites", "cache-plan", "rack-a")
	for _, f := range plan.Failed {
		if f.Digest != testkit.Digest(arts["named"]) {
			t.Errorf("sites cache-plan still shows %s failed: %+v", f.Ref, f)
		}
	}
	if n := named.Conns(); n != 0 {
		t.Errorf("%d connections to the loopback address the allowed name resolves to, after the update", n)
	}
}

// hasLine says whether a line of out holds every one of words.
func hasLine(out string, words ...string) bool {
	for line := range strings.Lines(out) {
		if !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(line, w) }) {
			return true
		}
	}
	return false
}
