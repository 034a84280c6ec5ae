package site

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/pem"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/cache"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
)

// TestSiteRunsOnItsClock: the site's parts run on the clock it is given, not the
// system's: a pull that fails waits for its retry on the site's clock and is tried
// again when that clock has moved on by the retry interval (before, the cache ran on
// the system clock whatever the site was given).
func TestSiteRunsOnItsClock(t *testing.T) {
	var gets atomic.Int32
	src := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		http.NotFound(w, r)
	}))
	defer src.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: src.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	fake := clock.NewFake(start)
	a := openProxySite(t, Config{Cache: CacheConfig{CAFile: caFile}, Clock: fake})
	img := proto.CacheImage{Ref: "os@1", Digest: strings.Repeat("ab", 32), Source: src.URL + "/os.raw", SizeBytes: 10,
		Format: proto.FormatRaw, Compression: proto.CompressionNone}
	if err := a.cache.SetDesired([]proto.CacheImage{img}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.cache.Run(ctx) }()
	defer func() { cancel(); <-done }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 30 s (%d requests, %d timers on the site's clock, entries %+v)", what, gets.Load(), fake.Waiters(), a.cache.Entries())
			}
		}
	}
	failed := func() bool {
		e := a.cache.Entries()
		return len(e) == 1 && e[0].State == proto.CacheFailed
	}
	waitFor("the pull fails and its retry waits on the site's clock", func() bool { return failed() && fake.Waiters() == 1 })
	pull := gets.Load() // the requests of one pull
	fake.Advance(cache.DefaultRetryInterval)
	waitFor("the image is pulled again once the site's clock moved by the retry interval", func() bool { return gets.Load() == 2*pull && failed() })
}

// TestSiteWithoutAClockSignsItsScripts: `bcd site` gives the site no clock (clock.Real
// is its default); a ramdisk entry with an extra initrd is rendered with the extra's
// cache URL signed on the real clock (before, the site's capability signer was left
// with no clock and the boot server's DHCP handler crashed the agent on such an entry).
func TestSiteWithoutAClockSignsItsScripts(t *testing.T) {
	a := openProxySite(t, Config{HTTPBase: "http://10.0.0.1"})
	const mac = "52:54:00:12:34:57"
	digest := strings.Repeat("cd", 32)
	a.entries.setStanding([]proto.BootEntry{{Node: "nd_1", MACs: []string{mac}, Kind: proto.BootRamdisk,
		Ramdisk: &proto.RamdiskBoot{Token: "t", Registry: "https://r", Extras: []proto.RamdiskExtra{{Ref: "x@1", Digest: digest}}}}})
	hw, _ := net.ParseMAC(mac)
	e, ok := a.entries.Entry(hw)
	if !ok || len(e.Ramdisk.Extras) != 1 {
		t.Fatalf("entry %+v, %v: want the ramdisk entry with its extra", e, ok)
	}
	query, ok := strings.CutPrefix(e.Ramdisk.Extras[0], "http://10.0.0.1/images/sha256/"+digest+"?")
	own := []ed25519.PublicKey{a.entries.caps.key.Public().(ed25519.PublicKey)}
	if !ok || !proto.VerifyCacheCap(own, query, digest, time.Now()) {
		t.Fatalf("extra's URL %q: want the cache's URL with a capability valid now", e.Ramdisk.Extras[0])
	}
}

// openProxySite opens the site agent's parts (open) with cfg, in the test's temporary
// directories, its boot server in proxy mode on 10.0.0.1; they are closed when the test
// ends.
func openProxySite(t *testing.T, cfg Config) *agent {
	t.Helper()
	a, _ := openSite(t, cfg, boot.Proxy)
	return a
}

// openSite opens the site agent's parts (open) with cfg, in the test's temporary
// directories, its boot server in mode on 10.0.0.1 (authoritative: over the range
// 10.0.0.10-10.0.0.13); they are closed when the test ends.
func openSite(t *testing.T, cfg Config, mode boot.Mode) (*agent, *boot.Server) {
	t.Helper()
	files := t.TempDir()
	cfg.StateDir, cfg.Cache.Dir = t.TempDir(), cmp.Or(cfg.Cache.Dir, t.TempDir())
	cfg.Boot = boot.Config{Interface: "bc0", Mode: mode, ServerIP: netip.MustParseAddr("10.0.0.1"), IPXEDir: files, RamdiskDir: files}
	if mode == boot.Authoritative {
		cfg.Boot.Subnet = netip.MustParsePrefix("10.0.0.0/24")
		cfg.Boot.Range = boot.Range{Start: netip.MustParseAddr("10.0.0.10"), End: netip.MustParseAddr("10.0.0.13")}
		cfg.Boot.LeaseFile = filepath.Join(t.TempDir(), "leases.db")
	}
	a, srv, err := open(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cache.Close(); srv.Close() })
	return a, srv
}
