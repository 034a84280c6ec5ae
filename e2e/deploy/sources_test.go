package deploy

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/fetch/fetchtest"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
)

// TestDeployFetchesOnlyFromTheSitesImageSources: tenant acme, with its own credential
// and signer, registers an image whose source is a host inside the provisioning network
// that the site does not allow (here a loopback HTTPS server the machine's ramdisk
// trusts, counting what it is asked), and deploys it on its machine at rack-a. The
// site's cache does not hold it, so before, deploy.image sent the ramdisk to the source
// and the machine fetched from the internal host onto acme's disk. Now deploy.deploy
// fails FORBIDDEN (source-not-allowed) at with.image before anything reaches the
// ramdisk, and the internal host is asked nothing. The same once the platform allows the
// host at the site, from a pool of acme's whose policy.imageSources leave it out.
func TestDeployFetchesOnlyFromTheSitesImageSources(t *testing.T) {
	w := newWorld(t)
	_, zst := osImage(t)
	var asked atomic.Int64
	internal := testkit.ServeTLS(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.ServeContent(rw, r, "", time.Time{}, bytes.NewReader(zst))
	}), filepath.Join(t.TempDir(), "internal.pem"))
	internalHost := internal.Listener.Addr().String()

	acme, key := w.tenant(t, "acme")
	testkit.RegisterImage(t, acme, testkit.Image{Ref: "export@1", Kind: "os", Source: internal.URL + "/admin/export.raw.zst", Format: "raw",
		Compression: "zstd", SHA256: testkit.Digest(zst), Size: int64(len(zst)), SignerID: "acme-key", Signer: key}, nil)
	testkit.JSON(t, acme, nil, "profiles", "create", writeFile(t, profile("export", "export@1")))
	testkit.JSON(t, acme, nil, "pools", "create", "gpu", "--site", "rack-a")
	testkit.JSON(t, acme, nil, "pools", "create", "narrow", "--site", "rack-a",
		"--policy", writeFile(t, fmt.Sprintf(`{"imageSources": [%q]}`, w.imageHost())))

	cases := []struct {
		name, pool, says string
		before           func()
	}{
		{name: "a host the site does not allow", pool: "gpu", says: "better-compute sites update rack-a --image-sources"},
		{name: "a host the pool leaves out", pool: "narrow", says: "pool narrow's policy.imageSources",
			before: func() {
				testkit.JSON(t, w.admin, nil, "sites", "update", "rack-a", "--image-sources", w.imageHost()+","+internalHost)
			}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before()
			}
			m, n := w.refusedDeploy(t, acme, tc.pool, "export", i)
			if n.Failure.Error.Details.Path != "with.image" {
				t.Fatalf("failure %+v: want it at with.image", n.Failure)
			}
			for _, want := range []string{internalHost, "rack-a", tc.says} {
				if !strings.Contains(n.Failure.Error.Message, want) {
					t.Errorf("the refusal does not say %q: %s", want, n.Failure.Error.Message)
				}
			}
			if got := asked.Load(); got != 0 {
				t.Errorf("the internal host was asked %d times", got)
			}
			if disk, _ := os.ReadFile(m.disk); !bytes.Equal(disk, make([]byte, len(disk))) {
				t.Errorf("the disk was written")
			}
		})
	}
}

// TestDeployFollowsNoRedirectOutOfTheSitesImageSources: the platform allows rack-a's
// machines to fetch from a host (here a loopback HTTPS server), and tenant acme, with
// its own credential and signer, registers an image on it that the site's cache does not
// hold. The allowed host answers the machine's ramdisk with a redirect to a host inside
// the provisioning network that the site does not allow (another loopback port, counting
// its connections, serving the image). Before, the ramdisk followed the redirect, fetched
// the image from the internal host onto acme's disk, and the node became active. Now the
// ramdisk refuses the redirect: deploy.deploy fails FORBIDDEN (source-not-allowed)
// naming the internal host, which is never connected to, and the disk stays blank.
func TestDeployFollowsNoRedirectOutOfTheSitesImageSources(t *testing.T) {
	w := newWorld(t)
	_, zst := osImage(t)
	internal := fetchtest.NewCounted(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		http.ServeContent(rw, r, "", time.Time{}, bytes.NewReader(zst))
	}))
	allowed := testkit.ServeTLS(t, http.RedirectHandler(internal.URL+"/admin/export.raw.zst", http.StatusFound), filepath.Join(t.TempDir(), "allowed.pem"))
	allowedHost := allowed.Listener.Addr().String()
	testkit.JSON(t, w.admin, nil, "sites", "update", "rack-a", "--image-sources", w.imageHost()+","+allowedHost)

	acme, key := w.tenant(t, "acme")
	testkit.RegisterImage(t, acme, testkit.Image{Ref: "export@1", Kind: "os", Source: allowed.URL + "/export.raw.zst", Format: "raw",
		Compression: "zstd", SHA256: testkit.Digest(zst), Size: int64(len(zst)), SignerID: "acme-key", Signer: key}, nil)
	testkit.JSON(t, acme, nil, "profiles", "create", writeFile(t, profile("export", "export@1")))
	testkit.JSON(t, acme, nil, "pools", "create", "gpu", "--site", "rack-a")

	m, n := w.refusedDeploy(t, acme, "gpu", "export", 0)
	if !strings.Contains(n.Failure.Error.Message, internal.Host()) {
		t.Errorf("the refusal does not name the internal host %s: %s", internal.Host(), n.Failure.Error.Message)
	}
	if got := internal.Conns(); got != 0 {
		t.Errorf("%d connections to the internal host", got)
	}
	if disk, _ := os.ReadFile(m.disk); !bytes.Equal(disk, make([]byte, len(disk))) {
		t.Errorf("the disk was written")
	}
}

// tenant makes tenant name, with a credential to deploy its own images (its config file)
// and a signer of its own, name-key.
func (w *world) tenant(t *testing.T, name string) (config string, key *openssl.Key) {
	config = filepath.Join(t.TempDir(), name+".conf")
	key = openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, w.admin, nil, "tenants", "create", name)
	testkit.JSON(t, w.admin, nil, "credentials", "create", "--tenant", name, "--out", config, "--actions",
		"compute:images:publish,compute:images:read,compute:pools:manage,compute:profiles:manage,compute:profiles:read,compute:nodes:manage,compute:nodes:read")
	testkit.JSON(t, w.admin, nil, "signers", "add", "--data-dir", w.reg.DataDir, "--tenant", name, "--id", name+"-key", "--public-key", key.PublicPath)
	return config, key
}

// refusedDeploy enrolls machine i of acme, whose credential config is, in its pool,
// deploys profile on it and expects deploy.deploy to fail FORBIDDEN
// (source-not-allowed).
func (w *world) refusedDeploy(t *testing.T, config, pool, profile string, i int) (*machine, store.Node) {
	t.Helper()
	uuid := fmt.Sprintf("4c4c4544-0042-3510-8052-b4c04f595a%02x", i)
	m := newMachine(t, uuid, 64<<20)
	var n store.Node
	testkit.JSON(t, w.admin, &n, "nodes", "enroll", "--tenant", "acme", "--pool", pool, "--mac", fmt.Sprintf("52:54:00:12:3a:%02x", i),
		"--product-uuid", uuid, "--bmc-driver", "qmp", "--bmc-address", "unix:///run/qmp.sock")
	w.site.add(n.ID, m)
	waitState(t, config, n.ID, store.NodeReady)

	res := testkit.CLI(t, config, "nodes", "deploy", n.ID, "--profile", profile, "--wait")
	if res.Code != 1 || !strings.Contains(res.Stderr+res.Stdout, "FORBIDDEN") {
		console, _ := os.ReadFile(filepath.Join(m.dir, "console.log"))
		t.Fatalf("deploy: exit %d, want FORBIDDEN\n%s\n%s\nmachine console:\n%s", res.Code, res.Stdout, res.Stderr, console)
	}
	testkit.JSON(t, config, &n, "nodes", "get", n.ID)
	if n.State != store.NodeFailed || n.Failure == nil || n.Failure.Use != "deploy.deploy" || n.Failure.Error.Code != proto.Forbidden ||
		n.Failure.Error.Details.Reason != proto.ReasonSourceNotAllowed {
		t.Fatalf("node %s, failure %+v: want deploy.deploy FORBIDDEN source-not-allowed", n.State, n.Failure)
	}
	return m, n
}
