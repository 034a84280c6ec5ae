package site

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// siteMetricsMove checks bcd site's /metrics against what the site did: it pulled the
// image of size bytes and served the range the test asked of it; then, scraping again,
// that a request (with a capability) of an image the cache does not hold is a miss and an HTTP 404, a TFTP
// read counts its bytes, and a DHCPDISCOVER of no network-boot client goes unanswered and
// is counted as dropped. No series names the image.
func siteMetricsMove(t *testing.T, reg *testkit.Registry, sa siteAgent, digest string, size int) {
	t.Helper()
	wants := map[string]float64{
		`bcd_cache_pulls_total{outcome="ready"}`:              1,
		`bcd_cache_pulled_bytes_total`:                        float64(size),
		`bcd_cache_used_bytes`:                                float64(size),
		`bcd_cache_requests_total{result="hit"}`:              1,
		`bcd_http_responses_total{kind="image",status="2xx"}`: 1,
		`bcd_http_sent_bytes_total{kind="image"}`:             1000,
		`bcd_session_connected`:                               1,
	}
	// The response is counted once its handler returns, which may be just after the
	// client has read its last byte: the series are read until they agree, for a while.
	var m map[string]float64
	var text string
	agree := func() bool {
		for series, want := range wants {
			if m[series] != want {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if m, text = testkit.Scrape(t, sa.metricsURL); agree() || time.Now().After(deadline) {
			break
		}
	}
	for series, want := range wants {
		if m[series] != want {
			t.Errorf("bcd site: %s is %v, want %v", series, m[series], want)
		}
	}
	if strings.Contains(text, digest) {
		t.Errorf("a series of bcd site names the image %s", digest)
	}

	absent := strings.Repeat("0", 64)
	absentURL := proto.CacheCapURL(fmt.Sprintf("http://127.0.0.1:%d/images/sha256/%s", sa.httpPort, absent), registryCacheKey(t, reg), absent, time.Now().Add(time.Hour))
	if err := exec.Command("curl", "-s", "-o", "/dev/null", absentURL).Run(); err != nil {
		t.Fatal(err)
	}
	file := make([]byte, 3000)
	if err := os.WriteFile(filepath.Join(sa.ipxeDir, "undionly.kpxe"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("curl", "-sf", fmt.Sprintf("tftp://127.0.0.1:%d/undionly.kpxe", sa.tftpPort)).Output(); err != nil || len(out) != len(file) {
		t.Fatalf("curl tftp: %v, %d bytes", err, len(out))
	}
	discover, err := dhcpv4.NewDiscovery(net.HardwareAddr{0x52, 0x54, 0, 0, 0, 0x42})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("udp4", fmt.Sprintf("127.0.0.1:%d", sa.dhcpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(discover.ToBytes()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bcd site's counters of the miss, the TFTP read and the DHCP drop", func() bool {
		m, _ = testkit.Scrape(t, sa.metricsURL)
		return m[`bcd_cache_requests_total{result="miss"}`] == 1 && m[`bcd_http_responses_total{kind="image",status="4xx"}`] == 1 &&
			m[`bcd_tftp_transfers_total{result="ok"}`] == 1 && m[`bcd_tftp_sent_bytes_total`] == float64(len(file)) &&
			m[`bcd_dhcp_dropped_total`] == 1
	})
}
