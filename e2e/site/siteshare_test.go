package site

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
)

// TestATenantsPrewarmListsLeaveAnotherTenantsCacheImages: tenant acme pre-warms one
// image at rack-a. Tenant beta, with its own credential and its own signer, registers
// 2,016 images of one byte each from sources of about 2,000 characters on the site's
// image source host and lists them all in 32 pools at rack-a. The site agent's NodeSpec
// carries the whole cache plan beside every tenant's boot entries; beta's lists alone
// took it past an agent frame, so the real `bcd site` got no NodeSpec at all and acme's
// image was never pulled. Now the plan keeps to the site's bounds by leaving out
// beta's last images (reason site-share, shown to the platform in `sites cache-plan`),
// and acme's image is at the site.
func TestATenantsPrewarmListsLeaveAnotherTenantsCacheImages(t *testing.T) {
	s := newSharedSite(t, nil)
	reg, admin, work, source, configs := s.reg, s.reg.AdminConfig, s.work, s.source, s.configs

	register := s.betaImages(t)
	const pools, perPool = 32, 63
	pad := strings.Repeat("x", 2000)
	refs := make([][]string, pools)
	for p := range pools { // every image first: each registration recomputes the site's plan
		for i := range perPool {
			ref := fmt.Sprintf("b%02d-%02d@1", p, i)
			register(ref, []byte{byte(p), byte(i)}, fmt.Sprintf("%s/%s/%02d-%02d.raw", source.URL, pad, p, i))
			refs[p] = append(refs[p], ref)
		}
	}
	for p := range pools {
		testkit.JSON(t, configs["beta"], nil, "pools", "create", fmt.Sprintf("beta-%02d", p), "--site", "rack-a", "--prewarm", strings.Join(refs[p], ","))
	}

	var plan api.CachePlan
	testkit.JSON(t, admin, &plan, "sites", "cache-plan", "rack-a")
	shared := 0
	for _, e := range plan.Excluded {
		if e.Reason == proto.ReasonSiteShare {
			if e.Tenant != "beta" {
				t.Fatalf("%s's %s left out of rack-a's plan: only beta lists more than its share", e.Tenant, e.Ref)
			}
			shared++
		}
	}
	if shared == 0 || !planNames(plan, "secret@1") || len(plan.CacheImages)+shared != pools*perPool+1 {
		t.Fatalf("rack-a's plan holds %d images, %d of beta's left out as beyond its share: want acme's secret@1 in and beta's last ones out",
			len(plan.CacheImages), shared)
	}

	startSiteAgent(t, reg, work, map[string]any{"dir": filepath.Join(work, "cache"), "caFile": s.caFile})
	s.waitReady(t)
}

// sharedSite is a registry (serve with newSharedSite's serveArgs) with tenants acme and beta (each a credential to publish and
// read images and manage pools), site rack-a whose image source serves acme.raw and
// files, and acme's signed image secret@1 (64 KiB, acme.raw) pre-warmed by its pool
// acme-gpu there.
type sharedSite struct {
	reg          *testkit.Registry
	work, caFile string
	source       *httptest.Server
	configs      map[string]string // tenant -> its credential's config
	acme         []byte            // secret@1's artifact
	acmeKey      *openssl.Key      // acme's signer acme-key
}

func newSharedSite(t *testing.T, files map[string][]byte, serveArgs ...string) sharedSite {
	s := sharedSite{work: t.TempDir(), configs: map[string]string{}, acme: make([]byte, 64<<10)}
	rand.Read(s.acme)
	s.caFile = filepath.Join(s.work, "source-ca.pem")
	s.source = testkit.ServeTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, ok := files[strings.TrimPrefix(r.URL.Path, "/")]
		if r.URL.Path == "/acme.raw" {
			data, ok = s.acme, true
		}
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}), s.caFile)

	s.reg = testkit.StartRegistry(t, t.TempDir(), append([]string{"--agent-listen", "127.0.0.1:0"}, serveArgs...)...)
	admin := s.reg.AdminConfig
	for _, tn := range []string{"acme", "beta"} {
		testkit.JSON(t, admin, nil, "tenants", "create", tn)
		s.configs[tn] = filepath.Join(s.work, tn+".conf")
		testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", tn, "--actions",
			"compute:images:publish,compute:images:read,compute:pools:manage", "--out", s.configs[tn])
	}
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--image-sources", s.source.Listener.Addr().String())

	s.acmeKey = openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", s.reg.DataDir, "--tenant", "acme", "--id", "acme-key", "--public-key", s.acmeKey.PublicPath)
	testkit.RegisterImage(t, s.configs["acme"], testkit.Image{Ref: "secret@1", Kind: "os", Source: s.source.URL + "/acme.raw", Format: "raw",
		Compression: "none", SHA256: testkit.Digest(s.acme), Size: int64(len(s.acme)), SignerID: "acme-key", Signer: s.acmeKey}, nil)
	testkit.JSON(t, s.configs["acme"], nil, "pools", "create", "acme-gpu", "--site", "rack-a", "--prewarm", "secret@1")
	return s
}

// betaImages adds beta's signer, whose key signs in process (thousands of signatures
// through openssl would take the test's time), and returns register, which registers
// beta's signed image ref of the bytes content at source.
func (s sharedSite) betaImages(t *testing.T) (register func(ref string, content []byte, source string)) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(pub)
	betaPub := filepath.Join(s.work, "beta.pub")
	testkit.WriteFile(t, betaPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600)
	testkit.JSON(t, s.reg.AdminConfig, nil, "signers", "add", "--data-dir", s.reg.DataDir, "--tenant", "beta", "--id", "beta-key", "--public-key", betaPub)
	beta := testkit.Client(t, s.configs["beta"])
	return func(ref string, content []byte, source string) {
		t.Helper()
		img := testkit.Image{Ref: ref, Kind: "os", Format: "raw", Compression: "none", SHA256: testkit.Digest(content), Size: int64(len(content))}
		req := api.RegisterImageRequest{Ref: img.Ref, Kind: proto.ImageKind(img.Kind), Format: proto.ImageFormat(img.Format),
			Compression: proto.Compression(img.Compression), SHA256: img.SHA256, SizeBytes: new(int64(img.Size)), Source: source,
			SignerID: "beta-key", Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(priv, img.SigningInput()))}
		if err := beta.Call(context.Background(), "images.register", req, nil); err != nil {
			t.Fatalf("beta registers %s: %v", img.Ref, err)
		}
	}
}

// waitReady waits for acme's secret@1 to be ready at rack-a.
func (s sharedSite) waitReady(t *testing.T) {
	t.Helper()
	waitFor(t, "acme's secret@1 ready at rack-a", func() bool {
		for _, l := range allLocations(t, s.reg.AdminConfig, "rack-a") { // beta's hundreds of images may list first
			if l.State == proto.CacheReady && l.Digest == testkit.Digest(s.acme) {
				return true
			}
		}
		return false
	})
}

func planNames(plan api.CachePlan, ref string) bool {
	for _, img := range plan.CacheImages {
		if img.Ref == ref {
			return true
		}
	}
	return false
}
