package site

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
)

// TestSiteCacheRefusesADigestWithoutACapability: acme's private image is cached at rack-a
// (the real registry, `bcd join` and `bcd site`). A machine of tenant beta on the
// provisioning network that learned its digest asks the site's cache for it directly:
// without a capability, with a forged one, and with one for another digest, it is refused
// 403 FORBIDDEN, by the very answer a digest the cache does not hold gets. A URL with a
// capability the registry's key signs (the key deploy.image's URLs are signed with,
// derived from the registry's secrets key) is served, ranges too.
func TestSiteCacheRefusesADigestWithoutACapability(t *testing.T) {
	artifact := make([]byte, 1<<20)
	rand.Read(artifact)
	digest := testkit.Digest(artifact)
	work := t.TempDir()
	caFile := filepath.Join(work, "source-ca.pem")
	source := testkit.ServeTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(artifact))
	}), caFile)
	reg := testkit.StartRegistry(t, t.TempDir(), "--agent-listen", "127.0.0.1:0")
	admin := reg.AdminConfig
	testkit.JSON(t, admin, nil, "tenants", "create", "acme")
	key := openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "acme", "--id", "acme-key", "--public-key", key.PublicPath)
	testkit.RegisterImage(t, admin, testkit.Image{Tenant: "acme", Ref: "secret@1", Kind: "os", Source: source.URL + "/acme.raw", Format: "raw",
		Compression: "none", SHA256: digest, Size: int64(len(artifact)), SignerID: "acme-key", Signer: key}, nil)
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--image-sources", source.Listener.Addr().String())
	testkit.JSON(t, admin, nil, "pools", "create", "acme-gpu", "--site", "rack-a", "--tenant", "acme", "--prewarm", "secret@1")
	sa := startSiteAgent(t, reg, work, map[string]any{"dir": filepath.Join(work, "cache"), "caFile": caFile})
	waitFor(t, "acme's image ready at rack-a", func() bool {
		var locs struct{ Locations []api.ImageLocation }
		testkit.JSON(t, admin, &locs, "sites", "locations", "rack-a")
		return len(locs.Locations) == 1 && locs.Locations[0].State == proto.CacheReady
	})

	base := fmt.Sprintf("http://127.0.0.1:%d%s", sa.httpPort, "/images/sha256/")
	absent := testkit.Digest([]byte("an image rack-a never held"))
	forged := strings.Repeat("A", proto.CacheCapLen)
	registryKey := registryCacheKey(t, reg)
	for name, query := range map[string]func(d string) string{
		"no capability":       func(string) string { return "" },
		"a forged capability": func(string) string { return "?" + proto.CacheCapQuery + forged },
		"another digest's": func(string) string {
			return "?" + proto.CacheCapQuery + proto.CacheCapability(registryKey, testkit.Digest(nil), time.Now().Add(time.Hour))
		},
		"an expired capability": func(d string) string {
			return "?" + proto.CacheCapQuery + proto.CacheCapability(registryKey, d, time.Now().Add(-time.Minute))
		},
	} {
		var bodies []string
		for _, d := range []string{digest, absent} {
			status, body := fetch(t, http.MethodGet, base+d+query(d), "")
			if status != http.StatusForbidden {
				t.Fatalf("%s: GET %s: %d %s, want 403", name, d, status, body)
			}
			var e proto.Error
			if err := json.Unmarshal(body, &e); err != nil || e.Code != proto.Forbidden || e.Details.Reason != proto.ReasonCacheCapability {
				t.Fatalf("%s: %s, want FORBIDDEN with reason %s", name, body, proto.ReasonCacheCapability)
			}
			bodies = append(bodies, string(body))
			if status, _ := fetch(t, http.MethodHead, base+d+query(d), ""); status != http.StatusForbidden {
				t.Fatalf("%s: HEAD %s: %d, want 403", name, d, status)
			}
		}
		if bodies[0] != bodies[1] {
			t.Errorf("%s: the answer tells the held digest from an absent one:\n%s\n%s", name, bodies[0], bodies[1])
		}
	}
	url := proto.CacheCapURL(base+digest, registryKey, digest, time.Now().Add(time.Hour))
	if status, body := fetch(t, http.MethodGet, url, ""); status != 200 || !bytes.Equal(body, artifact) {
		t.Fatalf("GET with the registry's capability: %d, %d bytes; want 200 and the image", status, len(body))
	}
	if status, body := fetch(t, http.MethodGet, url, "bytes=1000-1999"); status != 206 || !bytes.Equal(body, artifact[1000:2000]) {
		t.Fatalf("GET a range with the registry's capability: %d, %d bytes", status, len(body))
	}
}

// fetch asks url with method (and a Range when rng is set) and returns the status and body.
func fetch(t *testing.T, method, url, rng string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// registryCacheKey is the key the registry signs its cache URLs with, derived from the
// secrets key in its data directory as the registry derives it.
func registryCacheKey(t *testing.T, reg *testkit.Registry) ed25519.PrivateKey {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(reg.DataDir, pki.Dir, secret.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	box, err := secret.New(raw)
	if err != nil {
		t.Fatal(err)
	}
	return box.CacheCapabilityKey()
}
