package site

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/better-compute/better-compute/agent/metrics"
	"github.com/better-compute/better-compute/boot"
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
