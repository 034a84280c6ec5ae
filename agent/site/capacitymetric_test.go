package site

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/metrics"
	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/clock"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/testkit"
)

// TestReportedCapacityIsExported: a site without a capacity, its cache on a real 64 MiB
// filesystem, exports bcd_cache_reported_capacity_bytes as the figure its `site` section
// reports, within the filesystem (bcd_cache_capacity_bytes says 0, no bound). A scrape
// reads the figure last computed, not the filesystem: a file filling half of it moves
// the gauge only once the site reads its capacity again, and then down.
func TestReportedCapacityIsExported(t *testing.T) {
	const size = 64 << 20
	dir := testkit.SmallFS(t, size)
	a, _ := openSite(t, Config{Cache: CacheConfig{Dir: filepath.Join(dir, "cache")}}, boot.Proxy)
	addr, stop, err := metrics.Serve("127.0.0.1:0", "metricsListen", a.metrics.Gatherer(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	scrape := func() map[string]float64 {
		t.Helper()
		m, _ := testkit.Scrape(t, "http://"+addr.String()+"/metrics")
		return m
	}
	const gauge = "bcd_cache_reported_capacity_bytes"
	m := scrape()
	first := m[gauge]
	if reported := siteSection(t, a).CacheCapacityBytes; first <= 0 || first > size || first != float64(reported) || m["bcd_cache_capacity_bytes"] != 0 {
		t.Fatalf("%s %v, bcd_cache_capacity_bytes %v, on a %d-byte filesystem reported as %d: want the reported figure, within the filesystem, and 0 configured",
			gauge, first, m["bcd_cache_capacity_bytes"], size, reported)
	}
	if err := os.WriteFile(filepath.Join(dir, "other"), make([]byte, size/2), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := scrape()[gauge]; got != first {
		t.Errorf("%s moved to %v at a scrape after the filesystem filled, before the site read it again: want %v, the figure last reported", gauge, got, first)
	}
	a.refreshCapacity(slog.New(slog.DiscardHandler))
	if got, reported := scrape()[gauge], siteSection(t, a).CacheCapacityBytes; got <= 0 || got > first-size/4 || got != float64(reported) {
		t.Errorf("%s %v once the site read its capacity again with half the filesystem taken (reported %d, before %v): want the new, lower figure", gauge, got, reported, first)
	}
}

// TestReportedCapacityFollowsPulls: a site without a capacity, its cache on a real
// 64 MiB filesystem and its clock never moved (so the minute's refresh never comes),
// reports the filesystem's figure again as soon as its cache saw the room move. A file
// written beside the cache leaves the report as it was (the cache is not told of it);
// the pull that then fills the filesystem ends ready and the report, and the gauge,
// fall below what the filesystem holds; a second file and a pull that fails for capacity
// lower it again; with both files gone, an eviction that makes room for a larger image
// raises it by more than two steps. Before, the figure stayed as the site read it at
// start until the minute passed.
func TestReportedCapacityFollowsPulls(t *testing.T) {
	const size, mib = 64 << 20, 1 << 20
	dir := testkit.SmallFS(t, size)
	images := map[string][]byte{}
	img := func(name string, n int) proto.CacheImage {
		data := bytes.Repeat([]byte(name), n/len(name))
		images["/"+name] = data
		return proto.CacheImage{Ref: name + "@1", Digest: fmt.Sprintf("%x", sha256.Sum256(data)), SizeBytes: int64(len(data)),
			Format: proto.FormatRaw, Compression: proto.CompressionNone}
	}
	a, b, c := img("a", 24*mib), img("bb", 12*mib), img("ccc", 30*mib)
	src := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, ok := images[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	defer src.Close()
	for _, i := range []*proto.CacheImage{&a, &b, &c} {
		i.Source = src.URL + "/" + strings.TrimSuffix(i.Ref, "@1")
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: src.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	fake := clock.NewFake(time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC))
	st, _ := openSite(t, Config{Cache: CacheConfig{Dir: filepath.Join(dir, "cache"), CAFile: caFile}, Clock: fake}, boot.Proxy)
	addr, stop, err := metrics.Serve("127.0.0.1:0", "metricsListen", st.metrics.Gatherer(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.cache.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// reported is the `site` section's figure, once the `images` section shows want:
	// the cache tells the site the room moved before it reports the images.
	reported := func(when string, want map[string]proto.ImageCacheState) int64 {
		t.Helper()
		var got map[string]proto.ImageCacheState
		for deadline := time.Now().Add(60 * time.Second); !maps.Equal(got, want); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the images section shows %v after 60 s, want %v", when, got, want)
			}
			st.reports.mu.Lock()
			var list []proto.ImageCacheEntry
			err := json.Unmarshal(st.reports.sections[proto.SectionImages], &list)
			st.reports.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			got = map[string]proto.ImageCacheState{}
			for _, e := range list {
				got[e.Digest] = e.State
			}
		}
		r := siteSection(t, st).CacheCapacityBytes
		if m, _ := testkit.Scrape(t, "http://"+addr.String()+"/metrics"); m["bcd_cache_reported_capacity_bytes"] != float64(r) {
			t.Errorf("%s: bcd_cache_reported_capacity_bytes %v, want %d, the figure reported", when, m["bcd_cache_reported_capacity_bytes"], r)
		}
		return r
	}
	holds := func() int64 { // what the filesystem lets the cache hold now
		t.Helper()
		c, err := st.cache.Capacity()
		if err != nil {
			t.Fatal(err)
		}
		return c.FilesystemBytes
	}
	other := func(name string, n int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	first := siteSection(t, st).CacheCapacityBytes
	other("other.log", 16*mib)
	if got := siteSection(t, st).CacheCapacityBytes; got != first {
		t.Fatalf("a file written beside the cache moved the report from %d to %d before the cache saw the room move", first, got)
	}
	if err := st.cache.SetDesired([]proto.CacheImage{a}); err != nil {
		t.Fatal(err)
	}
	filled := reported("a pull filling the filesystem ended", map[string]proto.ImageCacheState{a.Digest: proto.CacheReady})
	if now := holds(); filled >= first || filled > now {
		t.Fatalf("right after a pull that filled the filesystem the site reports %d, as at start (%d), though the cache can hold only %d: want the figure read again, at most %d",
			filled, first, now, now)
	}

	other("other-2.log", 4*mib)
	if err := st.cache.SetDesired([]proto.CacheImage{a, b}); err != nil {
		t.Fatal(err)
	}
	refused := reported("a pull failed for capacity", map[string]proto.ImageCacheState{a.Digest: proto.CacheReady, b.Digest: proto.CacheFailed})
	if now := holds(); refused >= filled || refused > now {
		t.Errorf("right after a pull failed for capacity the site reports %d (before %d), though the cache can hold only %d: want the figure read again, at most %d",
			refused, filled, now, now)
	}

	for _, f := range []string{"other.log", "other-2.log"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.cache.SetDesired([]proto.CacheImage{c}); err != nil {
		t.Fatal(err)
	}
	freed := reported("an image evicted for a larger one", map[string]proto.ImageCacheState{c.Digest: proto.CacheReady})
	if now := holds(); freed < refused+2*capacityStep(refused) || freed > now {
		t.Errorf("right after an eviction made room the site reports %d (before %d), the cache holding %d: want the figure read again, two steps above the one before",
			freed, refused, now)
	}
}
