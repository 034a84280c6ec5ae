package store

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/sectionpack"
	"github.com/google/go-cmp/cmp"
)

// cacheEntries are n ready images of a site's cache, by digest, each held for
// proto.MaxImageCacheSources sources of a catalog: entries that compress.
func cacheEntries(n int) []proto.ImageCacheEntry {
	out := make([]proto.ImageCacheEntry, n)
	used := time.Date(2026, 8, 31, 12, 0, 0, 0, time.UTC)
	for i := range out {
		out[i] = proto.ImageCacheEntry{Digest: fmt.Sprintf("%064x", i+1), State: proto.CacheReady, SizeBytes: int64(i) << 20, LastUsed: used}
		for j := range proto.MaxImageCacheSources {
			out[i].Sources = append(out[i].Sources, fmt.Sprintf("https://images.example.com/tenant-%02d/image-%d.raw.zst", j, i))
		}
	}
	return out
}

// reportOf is site rack-1's report of agent a1 as read.
func reportOf(t *testing.T, s *Store) []proto.ImageCacheEntry {
	t.Helper()
	var out []proto.ImageCacheEntry
	err := s.View(func(tx *Tx) error {
		reports, err := tx.SiteCacheReports("rack-1")
		for _, r := range reports {
			out = r.Images
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCacheReportOfAnEarlierRelease: a site cache report an earlier release wrote (its
// entries as JSON under "images", 1,000 of them in about 900 KB) reads as it did, and the
// same entries reported again are no change; a report stored now takes its entries in
// sectionpack's form: compressed when large, and as JSON under "images", the earlier
// form, when small. The same on both backends.
func TestCacheReportOfAnEarlierRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		entries := cacheEntries(1000)
		err := s.Update(func(tx *Tx) error {
			if _, err := tx.CreateSite("rack-1"); err != nil {
				return err
			}
			// SiteCacheReport's JSON is the record an earlier release wrote.
			return tx.put(bucketSiteCacheReports, reportKey("rack-1", "a1"), SiteCacheReport{Site: "rack-1", AgentID: "a1", Images: entries})
		})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(entries, reportOf(t, s)); diff != "" {
			t.Fatalf("an earlier release's report (-want +got):\n%s", diff)
		}
		var changed bool
		err = s.Update(func(tx *Tx) (err error) {
			changed, err = tx.PutSiteCacheReport(SiteCacheReport{Site: "rack-1", AgentID: "a1", Images: entries})
			return err
		})
		if err != nil || changed {
			t.Fatalf("the same entries again: changed %v, %v; want no change", changed, err)
		}
		if diff := cmp.Diff(entries, reportOf(t, s)); diff != "" {
			t.Fatalf("the report stored again (-want +got):\n%s", diff)
		}
		first, _ := proto.Marshal(entries[0])
		s.View(func(tx *Tx) error {
			raw := tx.kv.get(bucketSiteCacheReports, reportKey("rack-1", "a1"))
			if size, _ := CacheReportSize(entries); len(raw) > size+sectionpack.RecordRoom || bytes.Contains(raw, first) {
				t.Errorf("the report of %d images is stored in %d bytes, as JSON: want it compressed", len(entries), len(raw))
			}
			return nil
		})

		small := entries[:1]
		err = s.Update(func(tx *Tx) (err error) {
			changed, err = tx.PutSiteCacheReport(SiteCacheReport{Site: "rack-1", AgentID: "a1", Images: small})
			return err
		})
		if err != nil || !changed {
			t.Fatalf("a report of one image: changed %v, %v", changed, err)
		}
		s.View(func(tx *Tx) error {
			if raw := tx.kv.get(bucketSiteCacheReports, reportKey("rack-1", "a1")); !bytes.Contains(raw, append([]byte(`"images":[`), first...)) {
				t.Errorf("a report of one image is stored as %s: want its entries' JSON under \"images\", as before", raw)
			}
			return nil
		})
		if diff := cmp.Diff(small, reportOf(t, s)); diff != "" {
			t.Fatalf("a report of one image (-want +got):\n%s", diff)
		}
	})
}

// TestACacheReportPastAFrameIsRefused: a report whose entries' JSON passes a frame (what
// a stored report decompresses to at most; an entry's U+2028 takes 6 bytes of it) is
// INVALID_INPUT at images, whatever it compresses to, and the report stored before still
// reads and is replaced by the next one, of exactly a frame. Stored, it would not have read back: every report of the site, and its next
// report's write, would have failed.
func TestACacheReportPastAFrameIsRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		s := openTest(t, open)
		before := cacheEntries(1)
		err := s.Update(func(tx *Tx) error {
			if _, err := tx.CreateSite("rack-1"); err != nil {
				return err
			}
			_, err := tx.PutSiteCacheReport(SiteCacheReport{Site: "rack-1", AgentID: "a1", Images: before})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		huge := cacheEntries(4)
		for i := range huge {
			for j := range huge[i].Sources {
				huge[i].Sources[j] += "?" + strings.Repeat("\u2028", proto.MaxFrame/len(huge)/len(huge[i].Sources)/3)
			}
		}
		err = s.Update(func(tx *Tx) error {
			_, err := tx.PutSiteCacheReport(SiteCacheReport{Site: "rack-1", AgentID: "a1", Images: huge})
			return err
		})
		if proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "images" {
			t.Fatalf("a report past a frame: %v; want INVALID_INPUT at images", err)
		}
		if diff := cmp.Diff(before, reportOf(t, s)); diff != "" {
			t.Fatalf("the report before (-want +got):\n%s", diff)
		}
		// A report of exactly a frame is stored, compressed, and reads back.
		next := cacheEntries(2)
		short, _ := proto.Marshal(next)
		next[1].Sources[0] += strings.Repeat("a", proto.MaxFrame-len(short))
		if b, _ := proto.Marshal(next); len(b) != proto.MaxFrame {
			t.Fatalf("the report takes %d bytes: want %d", len(b), proto.MaxFrame)
		}
		if err := s.Update(func(tx *Tx) error {
			_, err := tx.PutSiteCacheReport(SiteCacheReport{Site: "rack-1", AgentID: "a1", Images: next})
			return err
		}); err != nil {
			t.Fatalf("the next report: %v", err)
		}
		if diff := cmp.Diff(next, reportOf(t, s)); diff != "" {
			t.Fatalf("the next report (-want +got):\n%s", diff)
		}
	})
}
