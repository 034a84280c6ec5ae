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

	acme := filepath.Join(t.TempDir(), "acme.conf")
	key := openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, w.admin, nil, "tenants", "create", "acme")
	testkit.JSON(t, w.admin, nil, "credentials", "create", "--tenant", "acme", "--out", acme, "--actions",
		"compute:images:publish,compute:images:read,compute:pools:manage,compute:profiles:manage,compute:profiles:read,compute:nodes:manage,compute:nodes:read")
	testkit.JSON(t, w.admin, nil, "signers", "add", "--data-dir", w.reg.DataDir, "--tenant", "acme", "--id", "acme-key", "--public-key", key.PublicPath)
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
			uuid := fmt.Sprintf("4c4c4544-0042-3510-8052-b4c04f595a%02x", i)
			m := newMachine(t, uuid, 64<<20)
			var n store.Node
			testkit.JSON(t, w.admin, &n, "nodes", "enroll", "--tenant", "acme", "--pool", tc.pool, "--mac", fmt.Sprintf("52:54:00:12:3a:%02x", i),
				"--product-uuid", uuid, "--bmc-driver", "qmp", "--bmc-address", "unix:///run/qmp.sock")
			w.site.add(n.ID, m)
			waitState(t, acme, n.ID, store.NodeReady)

			res := testkit.CLI(t, acme, "nodes", "deploy", n.ID, "--profile", "export", "--wait")
			if res.Code != 1 || !strings.Contains(res.Stderr+res.Stdout, "FORBIDDEN") {
				console, _ := os.ReadFile(filepath.Join(m.dir, "console.log"))
				t.Fatalf("deploy: exit %d, want FORBIDDEN\n%s\n%s\nmachine console:\n%s", res.Code, res.Stdout, res.Stderr, console)
			}
			testkit.JSON(t, acme, &n, "nodes", "get", n.ID)
			if n.State != store.NodeFailed || n.Failure == nil || n.Failure.Use != "deploy.deploy" || n.Failure.Error.Code != proto.Forbidden ||
				n.Failure.Error.Details.Reason != proto.ReasonSourceNotAllowed || n.Failure.Error.Details.Path != "with.image" {
				t.Fatalf("node %s, failure %+v: want deploy.deploy FORBIDDEN source-not-allowed at with.image", n.State, n.Failure)
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
