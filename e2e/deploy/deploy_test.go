package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/ramdisk/gpt/gpttest"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
	"github.com/google/go-cmp/cmp"
	"go.etcd.io/bbolt"
)

// profile deploys image with cloud-init user data through the site, the ramdisk and
// kexec.
func profile(id, image string) string {
	return fmt.Sprintf(`{"id": %q, "version": 1, "target": "metal", "role": "host",
  "image": {"ref": %q, "format": "raw", "compression": "zstd"},
  "userData": {"kind": "cloud-init", "template": "bcd-host.yaml.hbs"},
  "steps": [
    {"use": "userdata.render"},
    {"use": "boot.prepareRamdisk", "on": "site"},
    {"use": "management.setBootDevice", "on": "site", "with": {"device": "pxe"}},
    {"use": "power.setPower", "on": "site", "with": {"action": "cycle"}},
    {"use": "wait.agentJoined", "with": {"role": "ramdisk"}, "timeout": "1m"},
    {"use": "inventory.refresh", "on": "ramdisk", "timeout": "1m"},
    {"use": "deploy.deploy", "on": "ramdisk", "timeout": "2m"},
    {"use": "management.setBootDevice", "on": "site", "with": {"device": "disk"}},
    {"use": "boot.kexec", "on": "ramdisk", "await": "rejoin", "timeout": "1m"}],
  "cleanup": [{"use": "boot.cleanUp", "on": "site"}]}`, id, image)
}

// world is a registry with a site, a pool, a platform signer and an image server.
type world struct {
	reg       *testkit.Registry
	serveArgs []string
	admin     string
	site      *site
	signer    *openssl.Key
	images    map[string][]byte // artifacts by path on the image server
	imageURL  string
	// mu guards images, asked and the gate: gate, when set, holds the image server's
	// first answer after half the artifact until it is closed; requested is closed when
	// that answer starts.
	mu              sync.Mutex
	gate, requested chan struct{}
	// asked counts the image server's requests by path.
	asked map[string]int
}

// newWorld starts the world; under -short it skips the test, which boots machines end
// to end.
func newWorld(t *testing.T) *world {
	w, certFile := newImageWorld(t)
	dir := t.TempDir()
	port := fmt.Sprint(testkit.FreePort(t, "tcp"))
	udc := userDataConfig(t, "https://127.0.0.1:"+port)
	w.serveArgs = []string{"--listen", "127.0.0.1:" + port, "--agent-listen", fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t, "udp")), "--userdata-config", udc,
		"--metrics-listen", "127.0.0.1:0"}
	w.reg = testkit.StartRegistry(t, dir, w.serveArgs...)
	w.setUp(t, certFile)
	return w
}

// userDataConfig writes a --userdata-config naming url as the control plane.
func userDataConfig(t *testing.T, url string) string {
	udc := filepath.Join(t.TempDir(), "userdata.json")
	if err := os.WriteFile(udc, []byte(fmt.Sprintf(`{"controlPlaneUrl": %q, "bcdUrl": "https://downloads.example/bcd", "bcdSha256": %q}`,
		url, strings.Repeat("ab", 32))), 0o600); err != nil {
		t.Fatal(err)
	}
	return udc
}

// setUp gives the world's registry w.reg its site, whose machines may fetch from the
// image server, pool and platform signer, and starts the site agent.
func (w *world) setUp(t *testing.T, certFile string) {
	w.admin = w.reg.AdminConfig
	testkit.JSON(t, w.admin, nil, "sites", "create", "rack-a", "--image-sources", w.imageHost())
	testkit.JSON(t, w.admin, nil, "pools", "create", "gpu", "--site", "rack-a")
	testkit.JSON(t, w.admin, nil, "signers", "add", "--data-dir", w.reg.DataDir, "--tenant", "root", "--id", "platform", "--public-key", w.signer.PublicPath)
	w.site = startSite(t, w.reg, "rack-a", certFile)
}

// newImageWorld is a world without its registry yet: its signer and image server, whose
// certificate is in the returned file. Under -short it skips the test.
func newImageWorld(t *testing.T) (*world, string) {
	if testing.Short() {
		t.Skip("boots machines end to end")
	}
	w := &world{signer: openssl.Generate(t, openssl.Ed25519), images: map[string][]byte{}, asked: map[string]int{}}
	certFile := filepath.Join(t.TempDir(), "images.pem")
	srv := testkit.ServeTLS(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		b, ok := w.images[r.URL.Path]
		w.asked[r.URL.Path]++
		gate, requested := w.gate, w.requested
		if r.Header.Get("Range") == "" {
			w.gate = nil
		}
		w.mu.Unlock()
		if !ok {
			http.NotFound(rw, r)
			return
		}
		if gate != nil && r.Header.Get("Range") == "" {
			rw.Header().Set("Content-Length", fmt.Sprint(len(b)))
			rw.Write(b[:len(b)/2])
			rw.(http.Flusher).Flush()
			close(requested)
			<-gate
			rw.Write(b[len(b)/2:])
			return
		}
		http.ServeContent(rw, r, "", time.Time{}, bytes.NewReader(b))
	}), certFile)
	w.imageURL = srv.URL
	return w, certFile
}

// osImage makes a small GPT disk image with an EFI and a root partition and returns
// it raw and zstd-compressed.
func osImage(t *testing.T) (raw, zst []byte) {
	path := filepath.Join(t.TempDir(), "os.raw")
	gpttest.OSImage(t, path, "root")
	out, err := exec.Command("zstd", "-q", "-f", "-3", path, "-o", path+".zst").CombinedOutput()
	if err != nil {
		t.Skipf("zstd: %v %s", err, out)
	}
	if raw, err = os.ReadFile(path); err == nil {
		zst, err = os.ReadFile(path + ".zst")
	}
	if err != nil {
		t.Fatal(err)
	}
	return raw, zst
}

// image serves artifact as the source of ref, an image of root with digest, raw and
// zstd-compressed, and returns it to register, signed by the platform.
func (w *world) image(ref string, artifact []byte, digest string) testkit.Image {
	path := "/" + ref + ".raw.zst"
	w.mu.Lock()
	w.images[path] = artifact
	w.mu.Unlock()
	return testkit.Image{Tenant: "root", Ref: ref, Kind: "os", Source: w.source(ref), Format: "raw", Compression: "zstd",
		SHA256: digest, Size: int64(len(artifact)), SignerID: "platform", Signer: w.signer}
}

// imageHost is the image server's HOST:PORT, as an image source pattern names it.
func (w *world) imageHost() string { return strings.TrimPrefix(w.imageURL, "https://") }

// source is where the image ref is served.
func (w *world) source(ref string) string { return w.imageURL + "/" + ref + ".raw.zst" }

// register serves artifact and registers it as ref with digest (signed unless unsigned).
func (w *world) register(t *testing.T, ref string, artifact []byte, digest string, signed bool) {
	img := w.image(ref, artifact, digest)
	if !signed {
		img.Signer = nil
	}
	testkit.RegisterImage(t, w.admin, img, nil)
}

// enroll enrolls a node with productUUID, gives it machine m, and waits for its
// enrollment to make it ready.
func (w *world) enroll(t *testing.T, mac, productUUID string, m *machine) string {
	var n store.Node
	testkit.JSON(t, w.admin, &n, "nodes", "enroll", "--pool", "gpu", "--mac", mac, "--product-uuid", productUUID,
		"--bmc-driver", "qmp", "--bmc-address", "unix:///run/qmp.sock")
	w.site.add(n.ID, m)
	waitState(t, w.admin, n.ID, store.NodeReady)
	return n.ID
}

// waitState waits until the node is in state, failing the test if it fails first;
// extra are further arguments of nodes get.
func waitState(t *testing.T, admin, node, state string, extra ...string) store.Node {
	t.Helper()
	var n store.Node
	waitFor(t, time.Minute, func() bool {
		testkit.JSON(t, admin, &n, append([]string{"nodes", "get", node}, extra...)...)
		return n.State == state || n.State == store.NodeFailed
	})
	if n.State != state {
		t.Fatalf("node %s is %s (%+v), want %s", node, n.State, n.Failure, state)
	}
	return n
}

// hostWorld is a world whose site caches the signed OS image e2e-os@1, with the profile
// e2e-host deploying it; it returns the image raw.
func hostWorld(t *testing.T) (*world, []byte) {
	w := newWorld(t)
	raw, zst := osImage(t)
	w.register(t, "e2e-os@1", zst, testkit.Digest(zst), true)
	w.site.cache(testkit.Digest(zst), zst, w.source("e2e-os@1"))
	testkit.JSON(t, w.admin, nil, "profiles", "create", writeFile(t, profile("e2e-host", "e2e-os@1")))
	return w, raw
}

// readyMachine makes a machine of size bytes reporting productUUID, enrolls it with mac
// and waits until it is ready.
func (w *world) readyMachine(t *testing.T, mac, productUUID string, size int) (string, *machine) {
	m := newMachine(t, productUUID, int64(size))
	return w.enroll(t, mac, productUUID, m), m
}

func TestDeployEndToEnd(t *testing.T) {
	w, raw := hostWorld(t)
	id, m := w.readyMachine(t, "52:54:00:12:34:01", "4c4c4544-0042-3510-8052-b4c04f595831", len(raw))
	enrolled := len(w.site.commands())
	res := testkit.CLI(t, w.admin, "nodes", "deploy", id, "--profile", "e2e-host", "--wait")
	console, _ := os.ReadFile(filepath.Join(m.dir, "console.log"))
	if res.Code != 0 || !strings.Contains(res.Stdout, "is active") {
		t.Fatalf("deploy: exit %d\n%s\n%s\nmachine console:\n%s", res.Code, res.Stdout, res.Stderr, console)
	}
	if !strings.Contains(res.Stdout, " read, ") {
		t.Errorf("no progress of deploy.image in:\n%s", res.Stdout)
	}

	// The image came from the site's cache, whose URL the registry took from the site
	// agent's reports, with a capability the key of the site's SiteSpec opens.
	if w.site.cacheHits() == 0 {
		t.Errorf("the ramdisk did not stream the image from the site cache")
	}

	// The site was asked what a deploy asks, in order, and the ramdisk's boot entry
	// carries a token, the registry and its three pins.
	var got []string
	for _, c := range w.site.commands()[enrolled:] {
		got = append(got, strings.TrimPrefix(c, id+" "))
	}
	if len(got) != 5 || !strings.Contains(got[0], `"token":"bcj_`) || !strings.Contains(got[0], `"args":["bc.node=`+id+`"]`) {
		t.Fatalf("site commands %q", got)
	}
	if diff := cmp.Diff([]string{`{"device":"pxe","persistent":false}`, `{"action":"cycle"}`, `{"device":"disk","persistent":false}`, ``}, got[1:]); diff != "" {
		t.Errorf("site commands (-want +got):\n%s", diff)
	}
	var entry proto.PrepareRamdisk
	json.Unmarshal([]byte(got[0]), &entry)
	if entry.Registry != w.reg.URL || len(entry.Pins) != 3 || entry.Pins[0] != w.reg.Pins.ServingCA {
		t.Errorf("boot entry %+v", entry)
	}

	// The disk holds the image byte for byte outside the root partition, whose file
	// system got the user data (and was mounted to read it at first boot).
	disk, err := os.ReadFile(m.disk)
	if err != nil {
		t.Fatal(err)
	}
	const rootStart, rootEnd = 4096 * 512, (4096 + 32768) * 512 // gpttest.OSImage's root
	if len(disk) != len(raw) || testkit.Digest(disk[:rootStart]) != testkit.Digest(raw[:rootStart]) || testkit.Digest(disk[rootEnd:]) != testkit.Digest(raw[rootEnd:]) {
		t.Errorf("the disk does not hold the image")
	}

	// The installed OS joined as the node, and its agent applies its NodeSpec.
	var n store.Node
	testkit.JSON(t, w.admin, &n, "nodes", "get", id)
	if n.State != store.NodeActive {
		t.Errorf("node %s", n.State)
	}
	applied := waitFor(t, 30*time.Second, func() bool {
		var v api.NodeView
		testkit.JSON(t, w.admin, &v, "nodes", "get", id)
		return v.Agent != nil && v.Agent.DesiredGeneration >= 1 && v.Agent.ObservedGeneration == v.Agent.DesiredGeneration && v.Agent.Host != nil
	})
	if !applied {
		t.Errorf("bcd node never applied the node's NodeSpec and reported its host section")
	}
}

func TestDeployRefuses(t *testing.T) {
	w := newWorld(t)
	_, zst := osImage(t)
	w.register(t, "good@1", zst, testkit.Digest(zst), true)
	w.register(t, "wrong-digest@1", zst, strings.Repeat("0", 64), true)
	w.register(t, "unsigned@1", zst, testkit.Digest(zst), false)
	cases := map[string]struct {
		image       string
		machineUUID string
		code        string
		reason      string
		noDeploy    bool
	}{
		"a digest that is not the artifact's": {image: "wrong-digest@1", code: "DRIVER_ERROR"},
		"an unsigned image":                   {image: "unsigned@1", code: "INVALID_STATE", reason: "unsigned", noDeploy: true},
		"another machine than the one enrolled": {image: "good@1", machineUUID: "00000000-0000-0000-0000-00000000dead",
			code: "DRIVER_ERROR", reason: proto.ReasonIdentityMismatch, noDeploy: true},
	}
	i := 0
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			i++
			uuid := fmt.Sprintf("4c4c4544-0042-3510-8052-b4c04f5958%02x", i)
			reported := uuid
			if tc.machineUUID != "" {
				reported = tc.machineUUID
			}
			m := newMachine(t, reported, 64<<20)
			id := w.enroll(t, fmt.Sprintf("52:54:00:12:35:%02x", i), uuid, m)
			prof := fmt.Sprintf("refuse-%d", i)
			testkit.JSON(t, w.admin, nil, "profiles", "create", writeFile(t, profile(prof, tc.image)))
			res := testkit.CLI(t, w.admin, "nodes", "deploy", id, "--profile", prof, "--wait")
			if res.Code != 1 || !strings.Contains(res.Stderr+res.Stdout, tc.code) {
				console, _ := os.ReadFile(filepath.Join(m.dir, "console.log"))
				t.Fatalf("deploy: exit %d, want a %s\n%s\n%s\nconsole:\n%s", res.Code, tc.code, res.Stdout, res.Stderr, console)
			}
			var n struct {
				State   string
				Failure *store.StepFailure
			}
			testkit.JSON(t, w.admin, &n, "nodes", "get", id)
			if n.State != store.NodeFailed || n.Failure == nil || string(n.Failure.Error.Code) != tc.code ||
				(tc.reason != "" && n.Failure.Error.Details.Reason != tc.reason) {
				t.Errorf("node %s, failure %+v", n.State, n.Failure)
			}
			disk, _ := os.ReadFile(m.disk)
			if tc.noDeploy && !bytes.Equal(disk, make([]byte, len(disk))) {
				t.Errorf("the disk was written")
			}
		})
	}
}

// TestDeployTrustsOnlyTheDeployingTenantsSigners: tenant alpha plants a public image
// os@1 signed by its own key. Neither beta's nor root's profile naming os@1 reaches it,
// and beta naming alpha/os@1 is refused before anything is written, since neither beta
// nor the platform trusts alpha's key.
func TestDeployTrustsOnlyTheDeployingTenantsSigners(t *testing.T) {
	w := newWorld(t)
	img := w.alphasImage(t)
	var planted store.Image
	testkit.RegisterImage(t, w.admin, img, &planted)
	testkit.JSON(t, w.admin, nil, "images", "promote", planted.ID, "--tenant", "alpha")
	testkit.JSON(t, w.admin, nil, "pools", "create", "gpu", "--tenant", "beta", "--site", "rack-a")

	cases := []struct {
		tenant, image, code, reason string
	}{
		{tenant: "beta", image: "os@1", code: "NOT_FOUND"},
		{tenant: "root", image: "os@1", code: "NOT_FOUND"},
		{tenant: "beta", image: "alpha/os@1", code: "INVALID_STATE", reason: "untrusted-signer"},
	}
	for i, tc := range cases {
		t.Run(tc.tenant+" "+tc.image, func(t *testing.T) {
			uuid := fmt.Sprintf("4c4c4544-0042-3510-8052-b4c04f5959%02x", i)
			m := newMachine(t, uuid, 64<<20)
			var n store.Node
			testkit.JSON(t, w.admin, &n, "nodes", "enroll", "--tenant", tc.tenant, "--pool", "gpu", "--mac", fmt.Sprintf("52:54:00:12:36:%02x", i),
				"--product-uuid", uuid, "--bmc-driver", "qmp", "--bmc-address", "unix:///run/qmp.sock")
			w.site.add(n.ID, m)
			waitState(t, w.admin, n.ID, store.NodeReady, "--tenant", tc.tenant)
			prof := fmt.Sprintf("uses-%d", i)
			testkit.JSON(t, w.admin, nil, "profiles", "create", writeFile(t, profile(prof, tc.image)), "--tenant", tc.tenant)
			res := testkit.CLI(t, w.admin, "nodes", "deploy", n.ID, "--profile", prof, "--tenant", tc.tenant, "--wait")
			if res.Code != 1 || !strings.Contains(res.Stderr+res.Stdout, tc.code) {
				t.Fatalf("deploy: exit %d, want a %s\n%s\n%s", res.Code, tc.code, res.Stdout, res.Stderr)
			}
			var got struct {
				State   string
				Failure *store.StepFailure
			}
			testkit.JSON(t, w.admin, &got, "nodes", "get", n.ID, "--tenant", tc.tenant)
			if got.State != store.NodeFailed || got.Failure == nil || string(got.Failure.Error.Code) != tc.code || got.Failure.Error.Details.Reason != tc.reason {
				t.Errorf("node %s, failure %+v", got.State, got.Failure)
			}
			if disk, _ := os.ReadFile(m.disk); !bytes.Equal(disk, make([]byte, len(disk))) {
				t.Errorf("the disk was written")
			}
		})
	}
}

// alphasImage makes the tenants alpha and beta, and a signer alpha-1 of alpha's own, and
// serves os@1, an image of alpha's signed by it, to register.
func (w *world) alphasImage(t *testing.T) testkit.Image {
	_, zst := osImage(t)
	alphaKey := openssl.Generate(t, openssl.Ed25519)
	for _, tenant := range []string{"alpha", "beta"} {
		testkit.JSON(t, w.admin, nil, "tenants", "create", tenant)
	}
	testkit.JSON(t, w.admin, nil, "signers", "add", "--data-dir", w.reg.DataDir, "--tenant", "alpha", "--id", "alpha-1", "--public-key", alphaKey.PublicPath)
	img := w.image("os@1", zst, testkit.Digest(zst))
	img.Tenant, img.SignerID, img.Signer = "alpha", "alpha-1", alphaKey
	return img
}

// TestDeployReadsAnotherTenantsPrivateImageAsNobodys: tenant alpha registers os@1,
// signed by its own key and private. beta's profiles name it by bare ref and as
// alpha/os@1 inside real runs (a real ramdisk joined each time): each run fails
// NOT_FOUND with the wording of an image nobody has (os@9, alpha/os@9), the ramdisk's
// disk stays blank, and neither alpha's source nor the site's cache is ever asked for
// the image, so no deploy.image carrying its source or digest was sent.
func TestDeployReadsAnotherTenantsPrivateImageAsNobodys(t *testing.T) {
	w := newWorld(t)
	img := w.alphasImage(t)
	testkit.RegisterImage(t, w.admin, img, nil)
	testkit.JSON(t, w.admin, nil, "pools", "create", "gpu", "--tenant", "beta", "--site", "rack-a")

	failure := func(i int, ref string) *proto.Error {
		uuid := fmt.Sprintf("4c4c4544-0042-3510-8052-b4c04f5961%02x", i)
		m := newMachine(t, uuid, 64<<20)
		var n store.Node
		testkit.JSON(t, w.admin, &n, "nodes", "enroll", "--tenant", "beta", "--pool", "gpu", "--mac", fmt.Sprintf("52:54:00:12:38:%02x", i),
			"--product-uuid", uuid, "--bmc-driver", "qmp", "--bmc-address", "unix:///run/qmp.sock")
		w.site.add(n.ID, m)
		waitState(t, w.admin, n.ID, store.NodeReady, "--tenant", "beta")
		prof := fmt.Sprintf("private-%d", i)
		testkit.JSON(t, w.admin, nil, "profiles", "create", writeFile(t, profile(prof, ref)), "--tenant", "beta")
		if res := testkit.CLI(t, w.admin, "nodes", "deploy", n.ID, "--profile", prof, "--tenant", "beta", "--wait"); res.Code != 1 {
			t.Fatalf("deploy of %s: exit %d, want 1\n%s\n%s", ref, res.Code, res.Stdout, res.Stderr)
		}
		var got struct {
			State   string
			Failure *store.StepFailure
		}
		testkit.JSON(t, w.admin, &got, "nodes", "get", n.ID, "--tenant", "beta")
		if disk, _ := os.ReadFile(m.disk); !bytes.Equal(disk, make([]byte, len(disk))) {
			t.Errorf("deploying %s wrote the disk", ref)
		}
		if got.State != store.NodeFailed || got.Failure == nil || got.Failure.Error == nil || got.Failure.Use != "deploy.deploy" {
			t.Fatalf("deploying %s: node %s, failure %+v; want deploy.deploy's, once the ramdisk joined", ref, got.State, got.Failure)
		}
		return got.Failure.Error
	}
	for i, tc := range []struct{ ref, nobodys string }{{"os@1", "os@9"}, {"alpha/os@1", "alpha/os@9"}} {
		t.Run(tc.ref, func(t *testing.T) {
			alphas, nobodys := failure(2*i, tc.ref), failure(2*i+1, tc.nobodys)
			if alphas.Code != proto.NotFound || alphas.Details.Path != nobodys.Details.Path ||
				strings.ReplaceAll(alphas.Message, "os@1", "REF") != strings.ReplaceAll(nobodys.Message, "os@9", "REF") {
				t.Errorf("alpha's private image is refused otherwise than one nobody has:\n%+v\n%+v", alphas, nobodys)
			}
		})
	}
	w.mu.Lock()
	asked := w.asked["/os@1.raw.zst"]
	w.mu.Unlock()
	if asked != 0 || w.site.cacheHits() != 0 {
		t.Errorf("alpha's image was fetched: %d requests at its source, %d at the site's cache", asked, w.site.cacheHits())
	}
}

func writeFile(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "doc.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// TestTamperedCatalogRow changes a signed field of an image's row in the store behind
// the registry's back: deploy.deploy refuses the image before anything is relayed.
func TestTamperedCatalogRow(t *testing.T) {
	dir := t.TempDir()
	reg := testkit.StartRegistry(t, dir)
	signer := openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, reg.AdminConfig, nil, "signers", "add", "--data-dir", dir, "--tenant", "root", "--id", "platform", "--public-key", signer.PublicPath)
	digest := strings.Repeat("1", 64)
	var img struct{ ID string }
	testkit.RegisterImage(t, reg.AdminConfig, testkit.Image{Tenant: "root", Ref: "img@1", Kind: "os", Source: "https://images.example/img.raw.zst",
		Format: "raw", Compression: "zstd", SHA256: digest, Size: 100, SignerID: "platform", Signer: signer}, &img)
	reg.Stop()

	db, err := bbolt.Open(filepath.Join(dir, "registry.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("images"))
		row := b.Get([]byte(img.ID))
		if row == nil {
			return fmt.Errorf("no row %s", img.ID)
		}
		tampered := bytes.Replace(row, []byte(digest), []byte(strings.Repeat("2", 64)), 1)
		return b.Put([]byte(img.ID), tampered)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	reg = testkit.StartRegistry(t, dir)
	testkit.JSON(t, reg.AdminConfig, nil, "sites", "create", "rack-a")
	testkit.JSON(t, reg.AdminConfig, nil, "pools", "create", "gpu", "--site", "rack-a")
	testkit.JSON(t, reg.AdminConfig, nil, "profiles", "create", writeFile(t, `{"id": "just-deploy", "version": 1, "target": "metal",
  "image": {"ref": "img@1"}, "steps": [{"use": "deploy.deploy", "on": "ramdisk"}]}`))
	var n store.Node
	testkit.JSON(t, reg.AdminConfig, &n, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:12:36:01", "--bmc-driver", "qmp", "--bmc-address", "unix:///q")
	startSite(t, reg, "rack-a", "")
	waitState(t, reg.AdminConfig, n.ID, store.NodeReady)
	res := testkit.CLI(t, reg.AdminConfig, "nodes", "deploy", n.ID, "--profile", "just-deploy", "--wait")
	if res.Code != 1 || !strings.Contains(res.Stderr+res.Stdout, "INVALID_STATE") {
		t.Fatalf("deploy of a tampered image: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	testkit.JSON(t, reg.AdminConfig, &n, "nodes", "get", n.ID)
	if n.Failure == nil || n.Failure.Use != "deploy.deploy" || n.Failure.Error.Details.Reason != "signature" {
		t.Errorf("failure %+v", n.Failure)
	}
}

// heldDeploy is a world with the profile e2e-host, whose signed image e2e-os@1 the site's
// cache does not hold, and a ready machine for it, enrolled with mac and productUUID.
// The image server holds its first answer halfway until gate is closed; requested is
// closed when that answer starts.
func heldDeploy(t *testing.T, mac, productUUID string) (w *world, id string, m *machine, gate, requested chan struct{}) {
	w = newWorld(t)
	id, m, gate, requested = w.hold(t, mac, productUUID)
	return w, id, m, gate, requested
}

// hold gives w the profile, image and held image server of heldDeploy, and its machine.
func (w *world) hold(t *testing.T, mac, productUUID string) (id string, m *machine, gate, requested chan struct{}) {
	raw, zst := osImage(t)
	w.register(t, "e2e-os@1", zst, testkit.Digest(zst), true)
	testkit.JSON(t, w.admin, nil, "profiles", "create", writeFile(t, profile("e2e-host", "e2e-os@1")))
	m = newMachine(t, productUUID, int64(len(raw)))
	id = w.enroll(t, mac, productUUID, m)
	gate, requested = make(chan struct{}), make(chan struct{})
	w.mu.Lock()
	w.gate, w.requested = gate, requested
	w.mu.Unlock()
	return id, m, gate, requested
}

// TestDeploySurvivesARegistryRestart stops the registry while the ramdisk streams the
// image and starts it again on the same data and addresses: the run resumes, the
// ramdisk answers the resent deploy.image from the write it finished, and the deploy
// ends as if nothing happened.
func TestDeploySurvivesARegistryRestart(t *testing.T) {
	w, id, m, gate, requested := heldDeploy(t, "52:54:00:12:37:01", "4c4c4544-0042-3510-8052-b4c04f5958aa")
	started := w.deployHeld(t, id, m, requested)
	w.reg.Stop()
	close(gate)
	w.reg = testkit.StartRegistry(t, w.reg.DataDir, w.serveArgs...)
	w.resumed(t, id, started.WorkflowID, m, time.Minute)
}

// deployHeld deploys e2e-host on node id (a machine of hold) and returns once the
// ramdisk asks the image server for the held image.
func (w *world) deployHeld(t *testing.T, id string, m *machine, requested chan struct{}) api.DeployStarted {
	var started api.DeployStarted
	testkit.JSON(t, w.admin, &started, "nodes", "deploy", id, "--profile", "e2e-host")
	select {
	case <-requested:
	case <-time.After(time.Minute):
		console, _ := os.ReadFile(filepath.Join(m.dir, "console.log"))
		t.Fatalf("the ramdisk never asked for the image; console:\n%s", console)
	}
	return started
}

// resumed waits up to d for node id's deploy, run workflow, to end, and checks that it
// made the node active with deploy.deploy's one attempt resumed rather than run again.
func (w *world) resumed(t *testing.T, id, workflow string, m *machine, d time.Duration) {
	t.Helper()
	var n store.Node
	ended := waitFor(t, d, func() bool {
		testkit.JSON(t, w.admin, &n, "nodes", "get", id)
		return n.State != store.NodeDeploying
	})
	var run api.WorkflowView
	testkit.JSON(t, w.admin, &run, "workflows", "get", workflow)
	if !ended || n.State != store.NodeActive {
		console, _ := os.ReadFile(filepath.Join(m.dir, "console.log"))
		t.Fatalf("node %s, failure %+v\nrun %+v\nconsole:\n%s", n.State, n.Failure, run, console)
	}
	for _, step := range run.Steps {
		if step.Use == "deploy.deploy" && len(step.Attempts) != 1 {
			t.Errorf("deploy.deploy took %d attempts; it should be resumed, not run again", len(step.Attempts))
		}
	}
}
