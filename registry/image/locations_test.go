package image

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/google/go-cmp/cmp"
)

// digest is a fake artifact digest made of one repeated hex digit.
func digest(c string) string { return strings.Repeat(c, 64) }

// siteFixture is a catalog with a site and images: a (acme) and a2 (beta) share an
// artifact; b and c are acme's own; the digest "e" is no catalog image's.
type siteFixture struct {
	st  *store.Store
	ids map[string]string // fixture name -> image id
	now time.Time
}

func newSiteFixture(t *testing.T) *siteFixture {
	t.Helper()
	return newSiteFixtureOn(t, storetest.Open)
}

// newSiteFixtureOn is newSiteFixture on the backend open opens (storetest.Backends).
func newSiteFixtureOn(t testing.TB, open func(testing.TB, store.Options) *store.Store) *siteFixture {
	t.Helper()
	f := &siteFixture{ids: map[string]string{}, now: time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)}
	f.st = openCatalogOn(t, open, store.Options{Now: func() time.Time { return f.now }})
	storetest.Update(t, f.st, func(tx *store.Tx) error {
		if _, err := tx.CreateSite("rack-1"); err != nil {
			return err
		}
		for _, im := range []struct{ name, tenant, digest string }{{"a", "acme", "a"}, {"a2", "beta", "a"}, {"b", "acme", "b"}, {"c", "acme", "c"}, {"d", "acme", "d"}, {"f", "acme", "f"}} {
			req := osRequest(im.name + "@1")
			req.SHA256 = digest(im.digest)
			img, err := Register(tx, Allowlist{}, im.tenant, req)
			if err != nil {
				return err
			}
			f.ids[im.name] = img.ID
		}
		return nil
	})
	return f
}

// locations returns the site's locations as fixture name -> state.
func (f *siteFixture) locations(t *testing.T) map[string]string {
	t.Helper()
	names := map[string]string{}
	for n, id := range f.ids {
		names[id] = n
	}
	out := map[string]string{}
	f.st.View(func(tx *store.Tx) error {
		locs, err := storetest.ImageLocations(tx, "rack-1")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range locs {
			out[names[l.ImageID]] = string(l.State)
		}
		return nil
	})
	return out
}

// entry is a report of digest d held for the source of acme's fixture image named d.
func entry(d string, state proto.ImageCacheState) proto.ImageCacheEntry {
	return proto.ImageCacheEntry{Digest: digest(d), State: state, SizeBytes: 100, Sources: []string{sourceOf(d)}}
}

// sourceOf is the source of the fixture image named name.
func sourceOf(name string) string { return osRequest(name + "@1").Source }

// step is one event at the site: an agent's report.
type step struct {
	agent   string
	entries []proto.ImageCacheEntry
	// cut: the agent left entries out of the report to fit its frame.
	cut bool
}

func (f *siteFixture) run(t *testing.T, s step) (changed bool, err error) {
	err = f.st.Update(func(tx *store.Tx) (err error) {
		changed, err = RecordSiteCacheReport(tx, "rack-1", s.agent, s.entries, s.cut)
		return err
	})
	return changed, err
}

func TestSiteLocationReconciliation(t *testing.T) {
	R, P, E, F := proto.CacheReady, proto.CachePulling, proto.CacheEvicting, proto.CacheFailed
	cases := map[string]struct {
		steps []step
		want  map[string]string
	}{
		// beta's a2 names acme's digest with its own source: the cache never pulled it
		// from there, so a2 is not at the site, and no deploy of it is given the copy.
		"the image of the source the cache verified, not another tenant's of the digest": {
			steps: []step{{agent: "a1", entries: []proto.ImageCacheEntry{entry("a", R)}}},
			want:  map[string]string{"a": "ready"},
		},
		// A site cuts its report to fit its frame: an image it leaves out is not
		// taken for evicted, and another agent's report does not stand in for it.
		"a cut report keeps the locations of the images it leaves out": {
			steps: []step{
				{agent: "a1", entries: []proto.ImageCacheEntry{entry("a", R), entry("b", R), entry("c", R)}},
				{agent: "a2", entries: []proto.ImageCacheEntry{entry("d", R)}},
				{agent: "a1", cut: true, entries: []proto.ImageCacheEntry{entry("b", E)}},
			},
			want: map[string]string{"a": "ready", "b": "evicting", "c": "ready", "d": "ready"},
		},
		"a whole report after a cut one drops what it does not name": {
			steps: []step{
				{agent: "a1", entries: []proto.ImageCacheEntry{entry("a", R), entry("b", R)}},
				{agent: "a1", cut: true, entries: []proto.ImageCacheEntry{entry("b", R)}},
				{agent: "a1", entries: []proto.ImageCacheEntry{entry("b", R)}},
			},
			want: map[string]string{"b": "ready"},
		},
		"every image whose source the cache verified": {
			steps: []step{{agent: "a1", entries: []proto.ImageCacheEntry{
				{Digest: digest("a"), State: R, SizeBytes: 100, Sources: []string{sourceOf("a"), sourceOf("a2")}}}}},
			want: map[string]string{"a": "ready", "a2": "ready"},
		},
		"a source verified by one agent, not another's": {
			steps: []step{
				{agent: "a1", entries: []proto.ImageCacheEntry{entry("a", R)}},
				{agent: "a2", entries: []proto.ImageCacheEntry{{Digest: digest("a"), State: P, SizeBytes: 100, Sources: []string{sourceOf("a2")}}}},
			},
			want: map[string]string{"a": "ready", "a2": "pulling"},
		},
		"a report without sources (an older site agent) locates nothing": {
			steps: []step{{agent: "a1", entries: []proto.ImageCacheEntry{{Digest: digest("b"), State: R, SizeBytes: 100}}}},
			want:  map[string]string{},
		},
		"ready on any agent wins": {
			steps: []step{{agent: "a1", entries: []proto.ImageCacheEntry{entry("b", P)}}, {agent: "a2", entries: []proto.ImageCacheEntry{entry("b", R)}}},
			want:  map[string]string{"b": "ready"},
		},
		"pulling before evicting": {
			steps: []step{{agent: "a1", entries: []proto.ImageCacheEntry{entry("b", E)}}, {agent: "a2", entries: []proto.ImageCacheEntry{entry("b", P)}}},
			want:  map[string]string{"b": "pulling"},
		},
		"evicting before failed": {
			steps: []step{{agent: "a1", entries: []proto.ImageCacheEntry{entry("b", F)}}, {agent: "a2", entries: []proto.ImageCacheEntry{entry("b", E)}}},
			want:  map[string]string{"b": "evicting"},
		},
		"failed alone": {
			steps: []step{{agent: "a1", entries: []proto.ImageCacheEntry{entry("c", F)}}},
			want:  map[string]string{"c": "failed"},
		},
		"a digest of no catalog image is ignored": {
			steps: []step{{agent: "a1", entries: []proto.ImageCacheEntry{entry("e", R)}}},
			want:  map[string]string{},
		},
		"a report that drops an image": {
			steps: []step{
				{agent: "a1", entries: []proto.ImageCacheEntry{entry("b", R), entry("c", R)}},
				{agent: "a1", entries: []proto.ImageCacheEntry{entry("c", R)}},
			},
			want: map[string]string{"c": "ready"},
		},
		"dropped by one agent, held by another": {
			steps: []step{
				{agent: "a1", entries: []proto.ImageCacheEntry{entry("b", R)}},
				{agent: "a2", entries: []proto.ImageCacheEntry{entry("b", P)}},
				{agent: "a1", entries: nil},
			},
			want: map[string]string{"b": "pulling"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newSiteFixture(t)
			for i, s := range tc.steps {
				if _, err := f.run(t, s); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
			if diff := cmp.Diff(tc.want, f.locations(t)); diff != "" {
				t.Errorf("locations (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSiteCacheReportChecks(t *testing.T) {
	f := newSiteFixture(t)
	r := entry("a", proto.CacheReady)
	if changed, err := f.run(t, step{agent: "a1", entries: []proto.ImageCacheEntry{r}}); !changed || err != nil {
		t.Fatalf("first report: changed %v, %v", changed, err)
	}
	if changed, err := f.run(t, step{agent: "a1", entries: []proto.ImageCacheEntry{r}}); changed || err != nil {
		t.Fatalf("same report again: changed %v, %v", changed, err)
	}
	cases := map[string]struct {
		agent   string
		entries []proto.ImageCacheEntry
		path    string
	}{
		"upper-case digest": {"a1", []proto.ImageCacheEntry{{Digest: strings.ToUpper(digest("a")), State: proto.CacheReady}}, "images[0].digest"},
		"short digest":      {"a1", []proto.ImageCacheEntry{{Digest: "abc", State: proto.CacheReady}}, "images[0].digest"},
		"twice":             {"a1", []proto.ImageCacheEntry{r, r}, "images[1].digest"},
		"unknown state":     {"a1", []proto.ImageCacheEntry{{Digest: digest("a"), State: "gone"}}, "images[0].state"},
		"negative size":     {"a1", []proto.ImageCacheEntry{{Digest: digest("a"), State: proto.CacheReady, SizeBytes: -1}}, "images[0].sizeBytes"},
		"too many sources":  {"a1", []proto.ImageCacheEntry{{Digest: digest("a"), State: proto.CacheReady, Sources: make([]string, proto.MaxImageCacheSources+1)}}, "images[0].sources"},
		"bad agent id":      {"a 1", nil, "agentId"},
		"too many":          {"a1", make([]proto.ImageCacheEntry, maxCacheEntries+1), "images"},

		// Why an image failed: a reason the registry knows, on a failed image; a refused
		// host only with its reason, and only a host and port, since a site agent's
		// report is shown in operators' terminals.
		"a reason of a ready image": {"a1", []proto.ImageCacheEntry{{Digest: digest("a"), State: proto.CacheReady, Reason: proto.ReasonCapacity}}, "images[0].reason"},
		"an unknown reason":         {"a1", []proto.ImageCacheEntry{{Digest: digest("a"), State: proto.CacheFailed, Reason: "gone fishing"}}, "images[0].reason"},
		"a refused host without its reason": {"a1", []proto.ImageCacheEntry{{Digest: digest("a"), State: proto.CacheFailed, Reason: proto.ReasonCapacity,
			RefusedHost: "cdn.example.com:443"}}, "images[0].refusedHost"},
		"a refused host without a port":         {"a1", []proto.ImageCacheEntry{refusedAt("cdn.example.com")}, "images[0].refusedHost"},
		"a refused host with a terminal escape": {"a1", []proto.ImageCacheEntry{refusedAt("cdn\x1b]0;owned\x07.example.com:443")}, "images[0].refusedHost"},
		"a refused host with a space":           {"a1", []proto.ImageCacheEntry{refusedAt("cdn example.com:443")}, "images[0].refusedHost"},
		"a refused host too long":               {"a1", []proto.ImageCacheEntry{refusedAt(strings.Repeat("a", proto.MaxRefusedHost) + ":443")}, "images[0].refusedHost"},

		// The other sources a ready image reports refused: each a source the image does
		// not hold, once, in order, with the host and port it was refused at.
		"a refused source without its host": {"a1", []proto.ImageCacheEntry{refusedBeside(proto.RefusedSource{Source: sourceOf("a2")})}, "images[0].refused[0].refusedHost"},
		"a refused source with a terminal escape in its host": {"a1", []proto.ImageCacheEntry{refusedBeside(
			proto.RefusedSource{Source: sourceOf("a2"), RefusedHost: "cdn\x1b[2J:443"})}, "images[0].refused[0].refusedHost"},
		"a refused source that is empty": {"a1", []proto.ImageCacheEntry{refusedBeside(proto.RefusedSource{RefusedHost: "cdn.example.com:443"})}, "images[0].refused[0].source"},
		"a refused source too long": {"a1", []proto.ImageCacheEntry{refusedBeside(
			proto.RefusedSource{Source: "https://" + strings.Repeat("a", maxSource), RefusedHost: "cdn.example.com:443"})}, "images[0].refused[0].source"},
		"a refused source the image holds": {"a1", []proto.ImageCacheEntry{refusedBeside(
			proto.RefusedSource{Source: sourceOf("a"), RefusedHost: "cdn.example.com:443"})}, "images[0].refused[0].source"},
		"a refused source twice": {"a1", []proto.ImageCacheEntry{refusedBeside(proto.RefusedSource{Source: sourceOf("a2"), RefusedHost: "cdn.example.com:443"},
			proto.RefusedSource{Source: sourceOf("a2"), RefusedHost: "cdn.example.com:443"})}, "images[0].refused[1].source"},
		"too many refused sources": {"a1", []proto.ImageCacheEntry{refusedBeside(make([]proto.RefusedSource, proto.MaxImageCacheSources+1)...)}, "images[0].refused"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := f.run(t, step{agent: tc.agent, entries: tc.entries})
			checkErr(t, err, proto.InvalidInput, tc.path, "")
		})
	}
	err := f.st.Update(func(tx *store.Tx) error { _, err := RecordSiteCacheReport(tx, "rack-9", "a1", nil, false); return err })
	checkErr(t, err, proto.NotFound, "", "")
}

// refusedAt is a failed entry of digest "a" whose fetch the site refused at host.
func refusedAt(host string) proto.ImageCacheEntry {
	return proto.ImageCacheEntry{Digest: digest("a"), State: proto.CacheFailed, Sources: []string{sourceOf("a")}, Reason: proto.ReasonSourceNotAllowed, RefusedHost: host}
}

// checkWhy checks the locations at rack-1 of the images named in wantLocs (state,
// reason, refused host), and the images of plan failed there (FailedAt).
func (f *siteFixture) checkWhy(t *testing.T, plan []proto.CacheImage, wantLocs map[string]store.SiteLocation, wantFailed []FailedImage) {
	t.Helper()
	f.st.View(func(tx *store.Tx) error {
		for name, want := range wantLocs {
			loc, err := tx.ImageLocation("rack-1", f.ids[name])
			if err != nil {
				t.Fatalf("%s's location: %v", name, err)
			}
			if got := (store.SiteLocation{State: loc.State, Reason: loc.Reason, RefusedHost: loc.RefusedHost}); got != want {
				t.Errorf("%s's location: %+v, want %+v", name, got, want)
			}
		}
		failed, err := FailedAt(tx, "rack-1", plan)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantFailed, failed); diff != "" {
			t.Errorf("failed beside the plan (-want +got):\n%s", diff)
		}
		return nil
	})
}

// refusedBeside is a ready entry of digest "a", held for its own source, that reports
// refused the other sources refused.
func refusedBeside(refused ...proto.RefusedSource) proto.ImageCacheEntry {
	return proto.ImageCacheEntry{Digest: digest("a"), State: proto.CacheReady, Sources: []string{sourceOf("a")}, Refused: refused}
}

// TestRefusedSecondSourceSaysWhy: a site's cache holds a digest ready for one tenant's
// image (a) and reports the source of another image of the digest (a2) refused by the
// site's image sources. a stays ready at the site; a2 is located failed there, with
// reason source-not-allowed and the host it was refused at, and listed so beside the
// plan. Once an agent holds the digest for a2's source too, a2 is ready and listed failed
// no more. Before, a2 had no location and nothing said why it was not at the site.
func TestRefusedSecondSourceSaysWhy(t *testing.T) {
	f := newSiteFixture(t)
	if _, err := f.run(t, step{agent: "a1", entries: []proto.ImageCacheEntry{
		refusedBeside(proto.RefusedSource{Source: sourceOf("a2"), RefusedHost: "cdn.example.com:443"})}}); err != nil {
		t.Fatal(err)
	}
	plan := []proto.CacheImage{{Ref: "a@1", Digest: digest("a"), Source: sourceOf("a")}, {Ref: "a2@1", Digest: digest("a"), Source: sourceOf("a2")}}
	f.checkWhy(t, plan, map[string]store.SiteLocation{
		"a":  {State: proto.CacheReady},
		"a2": {State: proto.CacheFailed, Reason: proto.ReasonSourceNotAllowed, RefusedHost: "cdn.example.com:443"},
	}, []FailedImage{{Ref: "a2@1", Digest: digest("a"), Source: sourceOf("a2"), Reason: proto.ReasonSourceNotAllowed, RefusedHost: "cdn.example.com:443"}})

	both := []string{sourceOf("a"), sourceOf("a2")}
	slices.Sort(both)
	if _, err := f.run(t, step{agent: "a2", entries: []proto.ImageCacheEntry{{Digest: digest("a"), State: proto.CacheReady, Sources: both}}}); err != nil {
		t.Fatal(err)
	}
	f.checkWhy(t, plan, map[string]store.SiteLocation{"a": {State: proto.CacheReady}, "a2": {State: proto.CacheReady}}, []FailedImage{})
}

// FuzzRefusedSource: a source a site agent reports refused beside a ready image, as the
// registry takes it: whatever is accepted is a source of the bound's length the image
// does not hold, with a host and a port within the bound, without a space or a byte an
// operator's terminal would act on.
func FuzzRefusedSource(f *testing.F) {
	for _, s := range []struct{ source, host string }{
		{sourceOf("a2"), "cdn.example.com:443"}, {sourceOf("a2"), "[fd00::7]:8443"}, {sourceOf("a"), "cdn.example.com:443"},
		{"", "cdn.example.com:443"}, {sourceOf("a2"), "cdn\x1b[2J:443"}, {sourceOf("a2"), ""}, {sourceOf("a2"), "cdn:99999"},
	} {
		f.Add(s.source, s.host)
	}
	f.Fuzz(func(t *testing.T, source, host string) {
		e := refusedBeside(proto.RefusedSource{Source: source, RefusedHost: host})
		if checkEntries([]proto.ImageCacheEntry{e}) != nil {
			return
		}
		if source == "" || len(source) > maxSource || slices.Contains(e.Sources, source) {
			t.Fatalf("refused source %q accepted", source)
		}
		h, port, err := net.SplitHostPort(host)
		if err != nil || h == "" || port == "" || len(host) > proto.MaxRefusedHost || strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r > '~' }) {
			t.Fatalf("refused host %q accepted", host)
		}
	})
}

// TestFailedImagesSayWhy: an image the site's cache failed to pull is located failed
// with the reason and refused host the agent gave, and listed beside the site's plan
// with them (FailedAt): a refused one and one failed for another reason, not a ready
// one, nor another tenant's image of the failed digest whose source the entry does not
// name. Once another agent holds the refused image ready, it is neither.
func TestFailedImagesSayWhy(t *testing.T) {
	f := newSiteFixture(t)
	refused := refusedAt("[fd00::7]:8443")
	if _, err := f.run(t, step{agent: "a1", entries: []proto.ImageCacheEntry{refused, entry("b", proto.CacheFailed), entry("c", proto.CacheReady)}}); err != nil {
		t.Fatal(err)
	}
	plan := []proto.CacheImage{}
	for _, name := range []string{"a", "a2", "b", "c"} {
		d := digest(name[:1])
		plan = append(plan, proto.CacheImage{Ref: name + "@1", Digest: d, Source: sourceOf(name)})
	}
	f.checkWhy(t, plan, map[string]store.SiteLocation{
		"a": {State: proto.CacheFailed, Reason: proto.ReasonSourceNotAllowed, RefusedHost: "[fd00::7]:8443"},
		"b": {State: proto.CacheFailed},
		"c": {State: proto.CacheReady},
	}, []FailedImage{
		{Ref: "a@1", Digest: digest("a"), Source: sourceOf("a"), Reason: proto.ReasonSourceNotAllowed, RefusedHost: "[fd00::7]:8443"},
		{Ref: "b@1", Digest: digest("b"), Source: sourceOf("b")},
	})

	if _, err := f.run(t, step{agent: "a2", entries: []proto.ImageCacheEntry{entry("a", proto.CacheReady)}}); err != nil {
		t.Fatal(err)
	}
	f.checkWhy(t, plan, map[string]store.SiteLocation{"a": {State: proto.CacheReady}},
		[]FailedImage{{Ref: "b@1", Digest: digest("b"), Source: sourceOf("b")}})
}

// TestEveryImageOfACachedArtifactIsAtTheSite: every image of a shared artifact is ready
// at the site, a pulling one pulling.
func TestEveryImageOfACachedArtifactIsAtTheSite(t *testing.T) {
	f := newSiteFixture(t)
	for _, s := range []step{{agent: "a1", entries: []proto.ImageCacheEntry{
		{Digest: digest("a"), State: proto.CacheReady, SizeBytes: 10, Sources: []string{sourceOf("a"), sourceOf("a2")}},
		{Digest: digest("b"), State: proto.CacheReady, SizeBytes: 20, Sources: []string{sourceOf("b")}},
		{Digest: digest("c"), State: proto.CacheReady, SizeBytes: 30, Sources: []string{sourceOf("c")}},
		{Digest: digest("d"), State: proto.CacheReady, SizeBytes: 5, Sources: []string{sourceOf("d")}},
		{Digest: digest("f"), State: proto.CachePulling, SizeBytes: 50, Sources: []string{sourceOf("f")}},
	}}} {
		if _, err := f.run(t, s); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"a": "ready", "a2": "ready", "b": "ready", "c": "ready", "d": "ready", "f": "pulling"}
	if diff := cmp.Diff(want, f.locations(t)); diff != "" {
		t.Errorf("locations (-want +got):\n%s", diff)
	}
}

// FuzzCacheEntryWhy: a site agent's word for why an image failed, as the registry
// takes it. Whatever is accepted is a failed image's known reason, and a refused host
// only with source-not-allowed: a host and a port within the bound, without a space or
// a byte an operator's terminal would act on.
func FuzzCacheEntryWhy(f *testing.F) {
	for _, s := range []struct{ state, reason, host string }{
		{"failed", proto.ReasonSourceNotAllowed, "cdn.example.com:443"}, {"failed", proto.ReasonSourceNotAllowed, "[fd00::7]:8443"},
		{"failed", proto.ReasonCapacity, ""}, {"ready", proto.ReasonCapacity, ""}, {"failed", proto.ReasonSourceNotAllowed, "cdn\x1b[2J:443"},
		{"failed", proto.ReasonSourceNotAllowed, "cdn:99999"}, {"failed", "", ""},
	} {
		f.Add(s.state, s.reason, s.host)
	}
	f.Fuzz(func(t *testing.T, state, reason, host string) {
		e := proto.ImageCacheEntry{Digest: digest("a"), State: proto.ImageCacheState(state), Reason: reason, RefusedHost: host}
		if checkEntries([]proto.ImageCacheEntry{e}) != nil || reason == "" {
			return
		}
		if e.State != proto.CacheFailed || !slices.Contains(proto.ImageCacheReasons, reason) {
			t.Fatalf("reason %q of a %s image accepted", reason, state)
		}
		if host == "" {
			return
		}
		h, port, err := net.SplitHostPort(host)
		if reason != proto.ReasonSourceNotAllowed || err != nil || h == "" || port == "" || len(host) > proto.MaxRefusedHost ||
			strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r > '~' }) {
			t.Fatalf("refused host %q accepted with reason %q", host, reason)
		}
	})
}
