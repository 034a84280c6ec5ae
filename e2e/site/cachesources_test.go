package site

import (
	"bytes"
	"crypto/rand"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
)

// TestSiteCacheServesOnlyVerifiedSources: tenant beta registers and signs images of its
// own with the digest of acme's image cached at rack-a, one from a source serving other
// bytes, one from a source serving the same bytes. The real site agent pulls acme's
// source and checks each of beta's: the registry locates beta's image only where its
// source served the bytes, so no deploy of the other is handed acme's copy.
func TestSiteCacheServesOnlyVerifiedSources(t *testing.T) {
	artifact, other := make([]byte, 1<<20), make([]byte, 1<<20)
	rand.Read(artifact)
	rand.Read(other)
	digest := testkit.Digest(artifact)
	work := t.TempDir()
	caFile := filepath.Join(work, "source-ca.pem")
	var badAsked atomic.Int64
	source := testkit.ServeTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := artifact
		if r.URL.Path == "/beta-bad.raw" {
			b = other
			badAsked.Add(1)
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
	}), caFile)

	reg := testkit.StartRegistry(t, t.TempDir(), "--agent-listen", "127.0.0.1:0")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "tenants", "create", "acme")
	testkit.JSON(t, admin, nil, "tenants", "create", "beta")
	ids := map[string]string{} // image id -> ref
	for _, im := range []struct{ tenant, ref, path string }{{"acme", "secret@1", "/acme.raw"}, {"beta", "bad@1", "/beta-bad.raw"}, {"beta", "good@1", "/beta-good.raw"}} {
		key := openssl.Generate(t, openssl.Ed25519)
		testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", reg.DataDir, "--tenant", im.tenant, "--id", im.tenant+"-"+im.ref[:3], "--public-key", key.PublicPath)
		var img store.Image
		testkit.RegisterImage(t, admin, testkit.Image{Tenant: im.tenant, Ref: im.ref, Kind: "os", Source: source.URL + im.path, Format: "raw",
			Compression: "none", SHA256: digest, Size: int64(len(artifact)), SignerID: im.tenant + "-" + im.ref[:3], Signer: key}, &img)
		ids[img.ID] = im.ref
	}
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--image-sources", source.Listener.Addr().String())
	testkit.JSON(t, admin, nil, "pools", "create", "acme-gpu", "--site", "rack-a", "--tenant", "acme", "--prewarm", "secret@1")
	testkit.JSON(t, admin, nil, "pools", "create", "beta-gpu", "--site", "rack-a", "--tenant", "beta", "--prewarm", "bad@1,good@1")
	var plan api.CachePlan
	testkit.JSON(t, admin, &plan, "sites", "cache-plan", "rack-a")
	if len(plan.CacheImages) != 3 {
		t.Fatalf("cache plan %+v: want acme's and beta's two images of the digest, each with its source", plan)
	}

	startSiteAgent(t, reg, work, map[string]any{"dir": filepath.Join(work, "cache"), "caFile": caFile})
	located := func() map[string]proto.ImageCacheState {
		var locs struct{ Locations []api.ImageLocation }
		testkit.JSON(t, admin, &locs, "sites", "locations", "rack-a")
		out := map[string]proto.ImageCacheState{}
		for _, l := range locs.Locations {
			out[ids[l.ImageID]] = l.State
		}
		return out
	}
	waitFor(t, "acme's and beta's good image ready at rack-a, beta's bad source asked", func() bool {
		at := located()
		return at["secret@1"] == proto.CacheReady && at["good@1"] == proto.CacheReady && badAsked.Load() > 0
	})
	if at := located(); len(at) != 2 {
		t.Fatalf("locations at rack-a %v: want secret@1 and good@1 only, not bad@1 (its source never served the bytes)", at)
	}
}
