package site

import (
	"context"
	"encoding/pem"
	"log/slog"
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
	files := t.TempDir()
	start := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	fake := clock.NewFake(start)
	cfg := Config{StateDir: t.TempDir(), Cache: CacheConfig{Dir: t.TempDir(), CAFile: caFile}, Clock: fake,
		Boot: boot.Config{Interface: "bc0", Mode: boot.Proxy, ServerIP: netip.MustParseAddr("10.0.0.1"), IPXEDir: files, RamdiskDir: files}}
	a, srv, err := open(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	defer a.cache.Close()
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

// TestSiteWithoutAClockSignsCacheURLs: a site given no clock (bcd site's own) runs on the
// system's, its capability signer too: signing a boot script's cache URL panicked, and
// bcd site with it, at the first DHCP request of a machine whose ramdisk entry names an
// extra initrd.
func TestSiteWithoutAClockSignsCacheURLs(t *testing.T) {
	files := t.TempDir()
	cfg := Config{StateDir: t.TempDir(), Cache: CacheConfig{Dir: t.TempDir()},
		Boot: boot.Config{Interface: "bc0", Mode: boot.Proxy, ServerIP: netip.MustParseAddr("10.0.0.1"), IPXEDir: files, RamdiskDir: files}}
	a, srv, err := open(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	defer a.cache.Close()
	if got := a.entries.cacheURL(strings.Repeat("ab", 32)); !strings.Contains(got, "cap=") {
		t.Errorf("cache URL %q, want one with a capability", got)
	}
}
