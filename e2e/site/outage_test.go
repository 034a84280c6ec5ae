package site

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/openssl"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// TestSiteWorksWhileTheRegistryIsDown stops the registry of a running `bcd site` and
// finds the site serving on its own: proxyDHCP answers a known machine's PXE request
// with its boot file, TFTP serves the iPXE binary, HTTP the machine's boot script (an
// entry of a deploy in flight, from the site's state) and a byte range of a cached
// image. What the site learns meanwhile waits for the registry: an image whose pull
// finished and a machine that asked to boot without an entry reach the registry once it
// is back, on the same agent endpoint.
func TestSiteWorksWhileTheRegistryIsDown(t *testing.T) {
	for _, tool := range []string{"curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s on PATH (.ci/deps.sh installs it)", tool)
		}
	}
	// The image's source holds its answer until the registry is down.
	artifact := make([]byte, 1<<20)
	rand.Read(artifact)
	sum := sha256.Sum256(artifact)
	digest := hex.EncodeToString(sum[:])
	gate := make(chan struct{})
	source := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-gate
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(artifact))
	}))
	t.Cleanup(source.Close)
	work := t.TempDir()
	caFile := filepath.Join(work, "source-ca.pem")
	testkit.WriteFile(t, caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: source.Certificate().Raw}), 0o644)

	dataDir := t.TempDir()
	reg := testkit.StartRegistry(t, dataDir, "--agent-listen", "127.0.0.1:0")
	admin := reg.AdminConfig
	key := openssl.Generate(t, openssl.Ed25519)
	testkit.JSON(t, admin, nil, "signers", "add", "--data-dir", reg.DataDir, "--tenant", "root", "--id", "platform", "--public-key", key.PublicPath)
	img := store.Image{Kind: proto.KindOS, Ref: "outage@1", Format: proto.FormatRaw, Compression: proto.CompressionNone, SHA256: digest}
	testkit.JSON(t, admin, nil, "images", "register", "--tenant", "root", "--ref", img.Ref, "--kind", "os",
		"--source", source.URL+"/outage.raw", "--disk-format", "raw", "--compression", "none", "--sha256", digest,
		"--size", fmt.Sprint(len(artifact)), "--signer", "platform", "--signature", base64.StdEncoding.EncodeToString(key.Sign(t, image.SigningInput(img))))
	testkit.JSON(t, admin, nil, "sites", "create", "rack-a", "--image-sources", source.Listener.Addr().String())
	testkit.JSON(t, admin, nil, "pools", "create", "prewarm", "--site", "rack-a", "--tenant", "root", "--prewarm", img.Ref)

	// A deploy in flight left a boot entry for its machine in the site's state; the
	// iPXE binary is in the site's ipxe directory.
	known, unknown := "52:54:00:00:00:09", "52:54:00:00:00:0a"
	testkit.WriteFile(t, filepath.Join(mkdir(t, work, "state"), "boot-entries.json"), []byte(`[{"node": "known-1", "macs": ["`+known+`"], "kind": "disk"}]`), 0o600)
	ipxeBinary := []byte("an iPXE binary for the test")
	testkit.WriteFile(t, filepath.Join(mkdir(t, work, "ipxe"), "undionly.kpxe"), ipxeBinary, 0o644)
	ports := startSiteAgent(t, reg, work, map[string]any{"dir": filepath.Join(work, "cache"), "caFile": caFile})
	location := func() proto.ImageCacheState {
		var locs struct{ Locations []api.ImageLocation }
		testkit.JSON(t, admin, &locs, "sites", "locations", "rack-a")
		if len(locs.Locations) != 1 || locs.Locations[0].Digest != digest {
			return ""
		}
		return locs.Locations[0].State
	}
	waitFor(t, "the image pulling at rack-a", func() bool { return location() == proto.CachePulling })

	reg.Stop()
	close(gate)
	imageURL := proto.CacheCapURL(fmt.Sprintf("http://127.0.0.1:%d/images/sha256/%s", ports.httpPort, digest), registryCacheKey(t, reg), digest, time.Now().Add(time.Hour))
	waitFor(t, "the image served by the site", func() bool {
		out, err := exec.Command("curl", "-sf", "-r", "1000-1999", imageURL).Output()
		return err == nil && bytes.Equal(out, artifact[1000:2000])
	})
	if out, err := exec.Command("curl", "-sf", fmt.Sprintf("tftp://127.0.0.1:%d/undionly.kpxe", ports.tftpPort)).Output(); err != nil || !bytes.Equal(out, ipxeBinary) {
		t.Errorf("TFTP with the registry down: %v, %q", err, out)
	}
	// The machine's request to the proxy port carried its address (ciaddr 127.0.0.1): its
	// script goes there.
	if file, err := proxyDHCP(ports.proxyPort, known); err != nil || file != "undionly.kpxe" {
		t.Errorf("proxyDHCP with the registry down: boot file %q, %v", file, err)
	}
	script, err := exec.Command("curl", "-sf", fmt.Sprintf("http://127.0.0.1:%d/boot/%s.ipxe", ports.httpPort, strings.ReplaceAll(known, ":", "-"))).Output()
	if err != nil || !strings.Contains(string(script), "exit") {
		t.Errorf("the known machine's boot script with the registry down: %v\n%s", err, script)
	}
	if _, err := proxyDHCP(ports.proxyPort, unknown); err != nil {
		t.Errorf("proxyDHCP of an unknown machine with the registry down: %v", err)
	}
	if _, err := exec.Command("curl", "-sf", fmt.Sprintf("http://127.0.0.1:%d/boot/%s.ipxe", ports.httpPort, strings.ReplaceAll(unknown, ":", "-"))).Output(); err != nil {
		t.Errorf("an unknown machine's boot script with the registry down: %v", err)
	}

	// Back on the same agent endpoint, the registry hears what the site learnt.
	testkit.StartRegistry(t, dataDir, "--agent-listen", reg.AgentEndpoint)
	waitFor(t, "the image ready at rack-a", func() bool { return location() == proto.CacheReady })
	waitFor(t, "the machine that asked to boot reported", func() bool {
		var inv struct{ Sections []api.InventorySection }
		testkit.JSON(t, admin, &inv, "sites", "inventory", "rack-a")
		for _, s := range inv.Sections {
			if s.Section == proto.SectionDiscoveries && bytes.Contains(s.Data, []byte(unknown)) {
				return true
			}
		}
		return false
	})
}

// proxyDHCP sends a PXE client's DHCPREQUEST for mac to the site's boot-server port on
// loopback and returns the boot file name of the answer.
func proxyDHCP(port int, mac string) (string, error) {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return "", err
	}
	req, err := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), dhcpv4.WithHwAddr(hw),
		dhcpv4.WithClientIP(net.IPv4(127, 0, 0, 1)),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.INTEL_X86PC)))
	if err != nil {
		return "", err
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if _, err := conn.WriteToUDP(req.ToBytes(), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}); err != nil {
		return "", err
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1500)
	n, err := conn.Read(buf)
	if err != nil {
		return "", err
	}
	resp, err := dhcpv4.FromBytes(buf[:n])
	if err != nil {
		return "", err
	}
	if resp.MessageType() != dhcpv4.MessageTypeAck || resp.TransactionID != req.TransactionID {
		return "", fmt.Errorf("answered %s", resp.MessageType())
	}
	return resp.BootFileName, nil
}
