package site

import (
	"bytes"
	"crypto/rand"
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

	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/fetch/fetchtest"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
)

// powerOn is a profile whose steps all run on the site agent against the machine's BMC.
const powerOn = `{"id": "power-on", "version": 1, "target": "metal",
  "steps": [{"use": "power.setPower", "on": "site", "with": {"action": "on"}, "timeout": "1m"},
            {"use": "management.setBootDevice", "on": "site", "with": {"device": "pxe"}, "timeout": "1m"},
            {"use": "media.insert", "on": "site", "with": {"url": "https://isos.example/rescue.iso"}, "timeout": "1m"}]}`

func TestSiteLoopback(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl on PATH (.ci/deps.sh installs it)")
	}
	// The image's source: a loopback HTTPS server holding a 1 MiB artifact.
	artifact := make([]byte, 1<<20)
	rand.Read(artifact)
	digest := testkit.Digest(artifact)
	work := t.TempDir()
	caFile := filepath.Join(work, "source-ca.pem")
	source := testkit.ServeTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(artifact))
	}), caFile)
	// A host inside the platform's network that a tenant names as an image source: the
	// site allows only the source above, so nothing ever connects here.
	internal := fetchtest.NewCounted(t, http.NotFoundHandler())

	// The machine's BMC, trusted by its key's pin through the hardware profile.
	sim := redfishsim.New(redfishsim.Config{Username: "admin", Password: "hunter2"})
	t.Cleanup(sim.Close)
	pin, err := joinwire.Pin(sim.Certificate.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	bmcOptions := fmt.Sprintf(`{"driver": "redfish", "config": {"options": {"tlsPin": %q, "pollInterval": "20ms"}}}`, pin)
	testkit.WriteFile(t, filepath.Join(dataDir, "hardware-profiles.json"), []byte(`{"version": 1, "hardwareProfiles": {"sim": {"drivers": {
		"power": `+bmcOptions+`, "management": `+bmcOptions+`, "virtual-media": `+bmcOptions+`}}}}`), 0o600)

	reg := testkit.StartRegistry(t, dataDir, "--agent-listen", "127.0.0.1:0")
	admin := reg.AdminConfig

	// A signed image that a pool of the site pre-warms.
	key := openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "root", "--id", "platform", "--public-key", key.PublicPath)
	img := testkit.Image{Tenant: "root", Ref: "site-test@1", Kind: "os", Source: source.URL + "/site-test.raw", Format: "raw",
		Compression: "none", SHA256: digest, Size: int64(len(artifact)), SignerID: "platform", Signer: key}
	testkit.RegisterImage(t, admin, img, nil)
	inside := img
	inside.Ref, inside.Source, inside.SHA256, inside.Size = "internal@1", internal.URL+"/latest/meta-data", strings.Repeat("00", 32), 1
	testkit.RegisterImage(t, admin, inside, nil)
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--bmc-networks", "127.0.0.1/32", "--image-sources", source.Listener.Addr().String()+",isos.example")
	testkit.JSON(t, admin, nil, "pools", "create", "prewarm", "--site", "rack-a", "--tenant", "root", "--prewarm", img.Ref+","+inside.Ref)

	sa := startSiteAgent(t, reg, work, map[string]any{"dir": filepath.Join(work, "cache"), "caFile": caFile})
	httpPort := sa.httpPort

	// The site pulls the image, reports it, and the registry shows it ready there.
	var plan api.CachePlan
	testkit.JSON(t, admin, &plan, "sites", "cache-plan", "rack-a")
	if len(plan.CacheImages) != 1 || plan.CacheImages[0].Digest != digest ||
		len(plan.Excluded) != 1 || plan.Excluded[0].Ref != inside.Ref || plan.Excluded[0].Reason != proto.ReasonSourceNotAllowed {
		t.Fatalf("cache plan %+v", plan)
	}
	waitFor(t, "the image ready at rack-a", func() bool {
		var locs struct{ Locations []api.ImageLocation }
		testkit.JSON(t, admin, &locs, "sites", "locations", "rack-a")
		return len(locs.Locations) == 1 && locs.Locations[0].Digest == digest && locs.Locations[0].State == proto.CacheReady
	})
	// Never used yet: the table's LAST USED is "-", not the zero time's year 1.
	if res := testkit.CLI(t, admin, "sites", "locations", "rack-a"); res.Code != 0 || !strings.Contains(res.Stdout, "ready") ||
		strings.Contains(res.Stdout, "0001-01-01") || !strings.HasSuffix(strings.TrimSpace(res.Stdout), " -") {
		t.Errorf("sites locations table (exit %d):\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	var inv struct {
		Sections []api.InventorySection
	}
	testkit.JSON(t, admin, &inv, "sites", "inventory", "rack-a")
	sections := map[string]string{}
	for _, s := range inv.Sections {
		var compact bytes.Buffer
		json.Compact(&compact, s.Data)
		sections[s.Section] = compact.String()
	}
	// The cache has no capacity: the site reports what its filesystem lets it hold.
	var site proto.SiteInventory
	json.Unmarshal([]byte(sections["site"]), &site)
	if want := fmt.Sprintf("http://127.0.0.1:%d", httpPort); site.HTTPBase != want || site.CacheCapacityBytes <= 0 || site.CacheConfiguredCapacityBytes != 0 ||
		len(site.Omitted) != 0 || sections["bootEntries"] != "[]" {
		t.Errorf("site agent's inventory %v: want site at %s, a cache capacity by its filesystem and none configured, and no boot entries", sections, want)
	}
	if bytes.Contains([]byte(sections["images"]), []byte(inside.SHA256)) || internal.Conns() != 0 {
		t.Errorf("the site cache took up the image from outside its sources: cache %s, %d connections to its host", sections["images"], internal.Conns())
	}
	cacheURL := proto.CacheCapURL(fmt.Sprintf("http://127.0.0.1:%d/images/sha256/%s", httpPort, digest), registryCacheKey(t, reg), digest, time.Now().Add(time.Hour))
	out, err := exec.Command("curl", "-sf", "-r", "1000-1999", cacheURL).Output()
	if err != nil || !bytes.Equal(out, artifact[1000:2000]) {
		t.Fatalf("curl a range of the cached image: %v, %d bytes", err, len(out))
	}
	siteMetricsMove(t, reg, sa, digest, len(artifact))

	// A workflow's site steps reach the machine's BMC through the registry and the site,
	// with the root tenant's secret.
	putSecret(t, admin, work, "secret://rack-bmc", `{"username": "admin", "password": "hunter2"}`)
	testkit.JSON(t, admin, nil, "pools", "create", "gpu", "--site", "rack-a", "--tenant", "root", "--policy", writeDoc(t, work, `{"hardwareProfile": "sim"}`))
	var node store.Node
	testkit.JSON(t, admin, &node, "nodes", "enroll", "--pool", "gpu", "--mac", "52:54:00:00:00:01", "--bmc-driver", "redfish",
		"--bmc-address", sim.URL, "--bmc-credential", "secret://rack-bmc")
	testkit.JSON(t, admin, nil, "profiles", "create", writeDoc(t, work, powerOn), "--tenant", "root")
	waitNode(t, admin, node.ID, store.NodeReady)
	if res := testkit.CLI(t, admin, "nodes", "deploy", node.ID, "--profile", "power-on", "--wait"); res.Code != 0 {
		t.Fatalf("deploy power-on: %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	if m := sim.Media(); sim.PowerState() != "On" || sim.Boot().Target != "Pxe" || !m.Inserted || m.Image != "https://isos.example/rescue.iso" {
		t.Fatalf("BMC after the relayed steps: power %s, boot %+v, media %+v", sim.PowerState(), sim.Boot(), m)
	}
}

// siteAgent is where a site agent started by startSiteAgent listens.
type siteAgent struct {
	httpPort, tftpPort, dhcpPort, proxyPort int
	// ipxeDir is the directory TFTP serves.
	ipxeDir    string
	metricsURL string
	// config is its bcd site configuration file.
	config string
	// stop stops the agent before the test ends.
	stop func()
	// log is what the agent has written so far.
	log func() string
}

// startSiteAgent joins the site agent of rack-a and runs it (startSite) with its boot
// server and its metrics on loopback ports and its cache configured by cache.
func startSiteAgent(t *testing.T, reg *testkit.Registry, work string, cache map[string]any) siteAgent {
	t.Helper()
	confDir := testkit.JoinSite(t, reg, "rack-a")
	sa := siteAgent{httpPort: testkit.FreePort(t, "tcp"), tftpPort: testkit.FreePort(t, "udp"), dhcpPort: testkit.FreePort(t, "udp"),
		proxyPort: testkit.FreePort(t, "udp"), ipxeDir: mkdir(t, work, "ipxe")}
	metricsListen := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t, "tcp"))
	sa.metricsURL = "http://" + metricsListen + "/metrics"
	cfg := map[string]any{
		"version": 1, "configDir": confDir, "stateDir": filepath.Join(work, "state"),
		"boot": map[string]any{"interface": "lo", "mode": "proxy", "serverIP": "127.0.0.1",
			"ipxeDir": sa.ipxeDir, "ramdiskDir": mkdir(t, work, "ramdisk"),
			"dhcpPort": sa.dhcpPort, "proxyPort": sa.proxyPort, "tftpPort": sa.tftpPort, "httpPort": sa.httpPort},
		"cache":         cache,
		"metricsListen": metricsListen,
	}
	siteConfig := filepath.Join(work, "site.json")
	data, _ := json.Marshal(cfg)
	testkit.WriteFile(t, siteConfig, data, 0o600)
	sa.config = siteConfig
	sa.stop, sa.log = startSite(t, siteConfig)
	return sa
}

// putSecret puts value as the secret ref of the tenant whose credential config is.
func putSecret(t *testing.T, config, work, ref, value string) {
	t.Helper()
	testkit.JSON(t, config, nil, "secrets", "put", "--ref", ref, "--file", writeDoc(t, work, value))
}

// startSite runs `bcd site` until the test ends or stop, and shows its log when the
// test fails; log is what it has written so far.
func startSite(t *testing.T, config string) (stop func(), log func() string) {
	t.Helper()
	stop, log = testkit.StartBCDLogged(t, nil, "site", "--config", config)
	stop = sync.OnceFunc(stop)
	t.Cleanup(stop)
	return stop, log
}

// allLocations is every location `sites locations` lists at site, page after page.
func allLocations(t *testing.T, admin, site string) []api.ImageLocation {
	t.Helper()
	var all []api.ImageLocation
	for cursor := ""; ; {
		var page api.SiteLocations
		testkit.JSON(t, admin, &page, "sites", "locations", site, "--cursor", cursor)
		all = append(all, page.Locations...)
		if cursor = page.NextCursor; cursor == "" {
			return all
		}
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	testkit.WaitFor(t, what, time.Minute, 250*time.Millisecond, ok)
}

func mkdir(t *testing.T, parent, name string) string {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeDoc(t *testing.T, dir, doc string) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "doc-*.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString(doc)
	return f.Name()
}
