package image

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// FuzzRecordSiteCacheReport records any `images` section a site agent stores, as
// registry/site reads it back, over a catalog and the reports before it: a refusal is
// INVALID_INPUT at the report's field, or leaves nothing changed; an accepted report is
// stored as the agent gave it (or, cut, with it), and every location at the site is of a
// catalog image whose digest some agent's last report names for the image's own source,
// ready only when an agent holds it ready for that source.
func FuzzRecordSiteCacheReport(f *testing.F) {
	fx := newSiteFixtureOn(f, storetest.Open)
	for _, s := range [][]proto.ImageCacheEntry{
		{entry("a", proto.CacheReady), entry("b", proto.CachePulling)},
		{refusedBeside(proto.RefusedSource{Source: sourceOf("a2"), RefusedHost: "cdn.example.com:443"})},
		{{Digest: digest("c"), State: proto.CacheFailed, Reason: proto.ReasonSourceNotAllowed, RefusedHost: "[fd00::7]:8443", Sources: []string{sourceOf("c")}}},
		{{Digest: digest("a"), State: proto.CacheReady, Sources: []string{sourceOf("a"), sourceOf("a2")}}},
		{entry("d", proto.CacheEvicting), entry("d", proto.CacheReady)},
	} {
		data, _ := json.Marshal(s)
		f.Add("a1", data, false)
		f.Add("a2", data, true)
	}
	f.Add("a1", []byte(`[{"digest":"`+digest("e")+`","state":"ready","sizeBytes":-1}]`), false)
	f.Add("../a1", []byte(`[]`), false)
	f.Fuzz(func(t *testing.T, agent string, data []byte, cut bool) {
		var entries []proto.ImageCacheEntry
		if json.Unmarshal(data, &entries) != nil {
			return
		}
		var before []store.SiteCacheReport
		err := fx.st.Update(func(tx *store.Tx) error {
			before, _ = tx.SiteCacheReports("rack-1")
			_, err := RecordSiteCacheReport(tx, "rack-1", agent, entries, cut)
			return err
		})
		if err != nil {
			if e := proto.AsError(err); e.Code != proto.InvalidInput || (!strings.HasPrefix(e.Details.Path, "images") && e.Details.Path != "agentId") {
				t.Fatalf("refused with %v at %q, not INVALID_INPUT at the report", err, e.Details.Path)
			}
			return
		}
		fx.st.View(func(tx *store.Tx) error {
			reports, err := tx.SiteCacheReports("rack-1")
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(reports, func(r store.SiteCacheReport) bool { return r.AgentID == agent })
			if i < 0 {
				t.Fatalf("the report of %q is not stored", agent)
			}
			stored := byDigest(reports[i].Images)
			given := byDigest(entries)
			for d, e := range given {
				if stored[d] != e {
					t.Fatalf("entry %s stored as %s (before %+v)", e, stored[d], before)
				}
			}
			if !cut && len(stored) != len(given) {
				t.Fatalf("a report of %d entries stored with %d (before %+v)", len(given), len(stored), before)
			}
			checkLocations(t, tx, reports)
			return nil
		})
	})
}

// byDigest is each entry's JSON by its digest.
func byDigest(entries []proto.ImageCacheEntry) map[string]string {
	out := map[string]string{}
	for _, e := range entries {
		b, _ := json.Marshal(e)
		out[e.Digest] = string(b)
	}
	return out
}

// checkLocations checks that every location at rack-1 is of a catalog image an entry of
// reports names, by digest and the image's own source, ready only when one holds it ready.
func checkLocations(t *testing.T, tx *store.Tx, reports []store.SiteCacheReport) {
	locs, err := storetest.ImageLocations(tx, "rack-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range locs {
		img, err := tx.Image(l.ImageID)
		if err != nil {
			t.Fatalf("location of %s: %v", l.ImageID, err)
		}
		named, ready := false, false
		for _, r := range reports {
			for _, e := range r.Images {
				if e.Digest != img.SHA256 {
					continue
				}
				serves := slices.Contains(e.Sources, img.Source)
				named = named || serves || slices.ContainsFunc(e.Refused, func(rs proto.RefusedSource) bool { return rs.Source == img.Source })
				ready = ready || (serves && e.State == proto.CacheReady)
			}
		}
		if !named || (l.State == proto.CacheReady && !ready) || !slices.Contains(proto.ImageCacheStates, l.State) {
			t.Fatalf("location %+v of %s (%s from %s) is not what the reports %+v say", l, img.Ref, img.SHA256, img.Source, reports)
		}
	}
}
