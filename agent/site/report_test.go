package site

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/agent/session"
	"github.com/better-compute/better-compute/boot"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/sectionpack"
	"github.com/better-compute/better-compute/testkit"
	"github.com/google/go-cmp/cmp"
)

// flooded is a site holding more than an agent frame in each of its sections: boot
// entries of 20,000 machines of four MACs each (one tenant's many machines) and 300
// cached images (bigImages).
func flooded(t *testing.T) (*entries, []proto.ImageCacheEntry) {
	t.Helper()
	es, err := openEntries(filepath.Join(t.TempDir(), entriesFile), fuzzRamdisk, "http://10.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	pins := []string{"sha256/" + strings.Repeat("A", 43) + "=", "sha256/" + strings.Repeat("B", 43) + "=", "sha256/" + strings.Repeat("C", 43) + "="}
	for i := range 20000 {
		node := fmt.Sprintf("n-%05d", i)
		var macs []string
		for j := range 4 {
			macs = append(macs, net.HardwareAddr{0x52, 0x54, byte(j), byte(i >> 16), byte(i >> 8), byte(i)}.String())
		}
		es.relayed[node] = proto.BootEntry{Node: node, MACs: macs, Kind: proto.BootRamdisk,
			Ramdisk: &proto.RamdiskBoot{Token: "bcj_x.y", Registry: "https://registry.example:7443", Pins: pins}}
	}
	es.rebuild()
	return es, bigImages(300)
}

// bigImages are n cached images of 16 verified sources of 2 KB each (many big-sourced
// images no longer pre-warmed), ready ones the oldest used and failed ones the newest.
func bigImages(n int) []proto.ImageCacheEntry {
	var images []proto.ImageCacheEntry
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		e := proto.ImageCacheEntry{Digest: fmt.Sprintf("%064x", i), State: proto.CacheReady, SizeBytes: 1, LastUsed: base.Add(time.Duration(i) * time.Second)}
		if i%2 == 1 {
			e.State, e.LastUsed = proto.CacheFailed, base.Add(time.Hour)
		}
		for j := range proto.MaxImageCacheSources {
			e.Sources = append(e.Sources, fmt.Sprintf("https://images.example/%s/%03d-%02d.raw", strings.Repeat("x", 2000), i, j))
		}
		images = append(images, e)
	}
	return images
}

// helloOf is the sections r gives the first hello of a session.
func helloOf(r *reports) (hello map[string]json.RawMessage) {
	r.open(func(h map[string]json.RawMessage) (*session.Agent, error) { hello = h; return nil, nil })
	return hello
}

// TestAFloodedSiteSaysHello: a site holding more than an agent frame of boot entries
// and images still says hello. Each section is cut to its budget, the `site` section
// counts what each leaves out, and the hello fits proto.MaxFrame; before, WriteMessage
// refused the hello and the site never connected.
func TestAFloodedSiteSaysHello(t *testing.T) {
	es, images := flooded(t)
	r := newReports(proto.SiteInventory{HTTPBase: "http://10.0.0.1:8080"})
	entriesData, entriesOmitted := es.section()
	r.set(proto.SectionBootEntries, entriesData, entriesOmitted)
	imagesData, imagesOmitted := imagesSection(images, nil)
	r.set(proto.SectionImages, imagesData, imagesOmitted)
	hello := helloOf(r)
	var frame bytes.Buffer
	if err := proto.WriteMessage(&frame, &proto.Message{Type: proto.MsgHello, Hello: &proto.Hello{Inventory: hello}}); err != nil {
		t.Fatalf("the hello of a flooded site: %v", err)
	}
	t.Logf("the hello of a flooded site: %d bytes", frame.Len())
	var info proto.SiteInventory
	if err := json.Unmarshal(hello[proto.SectionSite], &info); err != nil {
		t.Fatal(err)
	}
	if !info.SectionCut(proto.SectionBootEntries) || !info.SectionCut(proto.SectionImages) || info.SectionCut(proto.SectionDiscoveries) {
		t.Fatalf("site section %s: want bootEntries and images counted as cut", hello[proto.SectionSite])
	}

	var kept []proto.BootEntry
	if err := json.Unmarshal(hello[proto.SectionBootEntries], &kept); err != nil {
		t.Fatal(err)
	}
	if len(hello[proto.SectionBootEntries]) > bootEntriesBudget || len(kept) == 0 || len(kept)+info.Omitted[proto.SectionBootEntries] != 20000 {
		t.Fatalf("bootEntries: %d bytes, %d entries kept, %d left out of 20000", len(hello[proto.SectionBootEntries]), len(kept), info.Omitted[proto.SectionBootEntries])
	}
	for i, e := range kept { // the first nodes by id, tokens left out
		if want := fmt.Sprintf("n-%05d", i); e.Node != want || e.Ramdisk.Token != "" {
			t.Fatalf("bootEntries[%d] is %s (token %q): want %s without its token", i, e.Node, e.Ramdisk.Token, want)
		}
	}

	var held []proto.ImageCacheEntry
	if err := json.Unmarshal(hello[proto.SectionImages], &held); err != nil {
		t.Fatal(err)
	}
	if len(hello[proto.SectionImages]) > imagesBudget || len(held) == 0 || len(held)+info.Omitted[proto.SectionImages] != len(images) {
		t.Fatalf("images: %d bytes, %d kept, %d left out of %d", len(hello[proto.SectionImages]), len(held), info.Omitted[proto.SectionImages], len(images))
	}
	// The ready images first, the last used first: the ones the registry locates
	// deploys by, though the failed ones were used later.
	if !slices.IsSortedFunc(held, func(a, b proto.ImageCacheEntry) int { return b.LastUsed.Compare(a.LastUsed) }) {
		t.Fatal("the images kept are not the last used first")
	}
	for _, e := range held {
		if e.State != proto.CacheReady {
			t.Fatalf("a %s image kept while ready ones were left out", e.State)
		}
	}

	// Fewer entries again: the section is whole and the `site` section says so.
	es.relayed = map[string]proto.BootEntry{"n-00000": es.relayed["n-00000"]}
	entriesData, entriesOmitted = es.section()
	r.set(proto.SectionBootEntries, entriesData, entriesOmitted)
	info = proto.SiteInventory{}
	if err := json.Unmarshal(helloOf(r)[proto.SectionSite], &info); err != nil || info.SectionCut(proto.SectionBootEntries) || !info.SectionCut(proto.SectionImages) {
		t.Fatalf("site section %s after the entries shrank: want only images cut", helloOf(r)[proto.SectionSite])
	}
}

// TestEveryDiscoveryFitsItsBudget: the discoveries section's budget holds the
// maxDiscoveries machines it keeps, each with the longest fields DHCP gives, whole; a
// section cut further keeps the machines seen last.
func TestEveryDiscoveryFitsItsBudget(t *testing.T) {
	d := newDiscoveries()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range maxDiscoveries + 10 {
		mac := make(net.HardwareAddr, 16) // the longest a DHCP client hardware address is
		mac[14], mac[15] = byte(i>>8), byte(i)
		d.Discovered(boot.Discovery{MAC: mac, At: at.Add(time.Duration(i)*time.Second + 123456789),
			UUID: strings.Repeat("f", 8) + "-ffff-ffff-ffff-" + strings.Repeat("f", 12), Arch: 0xffff, HasArch: true})
	}
	data, omitted := d.section()
	t.Logf("%d discoveries of the longest form: %d bytes", maxDiscoveries, len(data))
	if omitted != 0 || len(data) > discoveriesBudget {
		t.Fatalf("%d discoveries in %d bytes, %d left out: want all within %d", maxDiscoveries, len(data), omitted, discoveriesBudget)
	}
	var list []proto.Discovery
	json.Unmarshal(data, &list)
	kept, omitted := cut(list, len(data)/2)
	var half []proto.Discovery
	json.Unmarshal(kept, &half)
	if omitted == 0 || len(half)+omitted != maxDiscoveries || !half[0].LastSeen.Equal(at.Add(time.Duration(maxDiscoveries+9)*time.Second+123456789)) {
		t.Fatalf("half the budget kept %d, left out %d: want the machines seen last", len(half), omitted)
	}
}

// TestCutKeepsWithinItsBudget: cut keeps the longest prefix whose array fits the
// budget, exactly.
func TestCutKeepsWithinItsBudget(t *testing.T) {
	list := []string{"aaaa", "bbbb", "cccc"} // "aaaa" is 6 bytes encoded
	for budget, want := range map[int]struct {
		data    string
		omitted int
	}{
		2: {`[]`, 3}, 8: {`["aaaa"]`, 2}, 14: {`["aaaa"]`, 2}, 15: {`["aaaa","bbbb"]`, 1}, 22: {`["aaaa","bbbb","cccc"]`, 0},
	} {
		data, omitted := cut(list, budget)
		if string(data) != want.data || omitted != want.omitted {
			t.Errorf("budget %d: %s, %d left out; want %s, %d", budget, data, omitted, want.data, want.omitted)
		}
	}
	if data, omitted := cut([]string(nil), 2); string(data) != "[]" || omitted != 0 {
		t.Errorf("no entries: %s, %d", data, omitted)
	}
}

// reportsOverQUIC opens r's session, as a site agent's, to an agent endpoint over real
// QUIC, and returns the messages the endpoint reads on the session stream other than
// pings, one a call: the hello first.
func reportsOverQUIC(t *testing.T, r *reports) (next func() proto.Message) {
	t.Helper()
	ca, err := testkit.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	ln, udp := testkit.ListenAgents(t, ca, nil, nil)
	cert, err := ca.AgentCertificate("st_1", string(proto.RoleSite))
	if err != nil {
		t.Fatal(err)
	}
	a, err := r.open(func(hello map[string]json.RawMessage) (*session.Agent, error) {
		return session.New(session.Config{Addr: udp.LocalAddr().String(), Certificate: cert, ServerCAs: ca.Pool(),
			Inventory: hello, Log: slog.New(slog.DiscardHandler)})
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	conn, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := conn.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Read on a goroutine of their own while the test goroutine reports: a section
	// larger than the stream's window is written only as the reader takes it.
	messages := make(chan proto.Message, 16)
	go func() {
		defer close(messages)
		for {
			m, err := proto.ReadMessage(stream)
			if err != nil {
				return
			}
			if m.Type != proto.MsgPing {
				messages <- m
			}
		}
	}()
	return func() proto.Message {
		t.Helper()
		m, ok := <-messages
		if !ok {
			t.Fatal("the session stream ended")
		}
		return m
	}
}

// TestAWholeSectionGoesBeforeTheSiteSection: the site's images section, cut in its
// first hello, is whole again; the reports send it before the `site` section that says
// so, over a real session to an agent endpoint, and a section cut again after the `site`
// section that counts it. So the registry never holds a `site` section saying images
// whole beside the cut copy, from which a cache report would drop the image locations
// that copy left out. Before, the `site` section always went first.
func TestAWholeSectionGoesBeforeTheSiteSection(t *testing.T) {
	images := bigImages(300)
	r := newReports(proto.SiteInventory{HTTPBase: "http://10.0.0.1:8080"})
	report := func(images []proto.ImageCacheEntry) {
		data, omitted := imagesSection(images, nil)
		r.set(proto.SectionImages, data, omitted)
	}
	report(images)
	next := reportsOverQUIC(t, r)
	var info proto.SiteInventory
	if hello := next(); hello.Type != proto.MsgHello || json.Unmarshal(hello.Hello.Inventory[proto.SectionSite], &info) != nil || !info.SectionCut(proto.SectionImages) {
		t.Fatalf("the first message: %s; want a hello whose `site` section says images cut", hello.Type)
	}
	// Once the hello is read the session is up: what the reports send now goes on it.
	var sent []string
	received := func() {
		t.Helper()
		for range 2 {
			m := next()
			if m.Type != proto.MsgInventory {
				t.Fatalf("a %s on the session stream; want inventory sections", m.Type)
			}
			sent = append(sent, m.Inventory.Section)
		}
	}
	report(images[:5])
	received()
	report(images)
	received()
	if diff := cmp.Diff([]string{proto.SectionImages, proto.SectionSite, proto.SectionSite, proto.SectionImages}, sent); diff != "" {
		t.Errorf("images whole again, then cut again: the sections in the order sent (-want +got):\n%s", diff)
	}
}

// TestAnUnchangedSectionIsNotSentAgain: the site's cache reports its images as they
// were (a last use written, a NodeSpec pushed again), twice, then a change: over a real
// session to an agent endpoint only the change goes out, so the registry reads (and
// spaces) no copy of a section it holds already, each up to an agent frame. Before,
// every report was sent, the unchanged cut `images` section (1.5 MiB at its budget)
// each time.
func TestAnUnchangedSectionIsNotSentAgain(t *testing.T) {
	images := bigImages(300)
	r := newReports(proto.SiteInventory{HTTPBase: "http://10.0.0.1:8080"})
	report := func(images []proto.ImageCacheEntry) json.RawMessage {
		data, omitted := imagesSection(images, nil)
		r.set(proto.SectionImages, data, omitted)
		return data
	}
	report(images)
	next := reportsOverQUIC(t, r)
	if hello := next(); hello.Type != proto.MsgHello {
		t.Fatalf("the first message: %s; want the hello", hello.Type)
	}
	report(images)
	report(images)
	whole := report(images[:5])
	for _, want := range []string{proto.SectionImages, proto.SectionSite} {
		m := next()
		if m.Type != proto.MsgInventory || m.Inventory.Section != want {
			t.Fatalf("a %s on the session stream; want the %s section of the change", m.Type, want)
		}
		if want == proto.SectionImages && !bytes.Equal(m.Inventory.Data, whole) {
			t.Fatalf("the images section sent is %d bytes, want the changed one of %d: a section sent again unchanged", len(m.Inventory.Data), len(whole))
		}
	}
}

// randomSourced are n ready images, never used, in digest order, each with
// proto.MaxImageCacheSources sources of about 2 KB of random characters: entries that do
// not compress, as a tenant that registers such sources and pre-warms them can make the
// site's cache keep.
func randomSourced(n int) []proto.ImageCacheEntry {
	const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	r := rand.New(rand.NewPCG(3, 3))
	images := make([]proto.ImageCacheEntry, n)
	for i := range images {
		images[i] = proto.ImageCacheEntry{Digest: fmt.Sprintf("%064x", i), State: proto.CacheReady, SizeBytes: 1}
		for j := range proto.MaxImageCacheSources {
			pad := make([]byte, 2000)
			for k := range pad {
				pad[k] = letters[r.IntN(len(letters))]
			}
			images[i].Sources = append(images[i].Sources, fmt.Sprintf("https://images.example/%s/%03d-%02d.raw", pad, i, j))
		}
	}
	return images
}

// TestRandomSourcesFitWhatTheRegistryStores: 300 cached images of 16 sources of 2 KB of
// random characters each. The `images` section cut to its 1.5 MiB budget did not
// compress, so the registry refused it (its stored form over proto.MaxInventoryRecord) and
// kept the copy stored before: images cached since, every tenant's, were never located.
// Now the site cuts the section until its stored form fits sectionpack.MaxData, as many
// entries as fit: one more would not, and a real bbolt store takes the hello's section.
func TestRandomSourcesFitWhatTheRegistryStores(t *testing.T) {
	images := randomSourced(300)
	r := newReports(proto.SiteInventory{HTTPBase: "http://10.0.0.1:8080"})
	data, omitted := imagesSection(images, nil)
	r.set(proto.SectionImages, data, omitted)
	section := helloOf(r)[proto.SectionImages]
	if size := sectionpack.Pack(section).Size(); size > sectionpack.MaxData {
		t.Fatalf("the images section's stored form takes %d bytes: want at most %d", size, sectionpack.MaxData)
	}
	var held []proto.ImageCacheEntry
	if err := json.Unmarshal(section, &held); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d images of 300 kept in %d bytes, %d bytes stored", len(held), len(section), sectionpack.Pack(section).Size())
	if len(held) == 0 || len(held)+omitted != len(images) {
		t.Fatalf("%d images kept, %d left out of %d", len(held), omitted, len(images))
	}
	if more, _ := json.Marshal(images[:len(held)+1]); sectionpack.Fits(more) {
		t.Fatalf("%d images kept where %d fit the stored bound", len(held), len(held)+1)
	}
	for i, e := range held {
		if e.Digest != images[i].Digest {
			t.Fatalf("images[%d] is %s: want the first images in order", i, e.Digest)
		}
	}

	st, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Update(func(tx *store.Tx) error {
		_, err := tx.PutInventory("rack-a", proto.SectionImages, section)
		return err
	}); err != nil {
		t.Fatalf("the registry's store takes the hello's images section: %v", err)
	}
}

// TestPlannedImagesComeFirst: an image of the site's cache plan, last of 300 by digest
// and never used, is kept in a cut `images` section before images no pool lists any more:
// another tenant's many images left in the cache no longer push it out.
func TestPlannedImagesComeFirst(t *testing.T) {
	images := randomSourced(300)
	last := images[len(images)-1].Digest
	data, omitted := imagesSection(images, map[string]bool{last: true})
	var held []proto.ImageCacheEntry
	if err := json.Unmarshal(data, &held); err != nil {
		t.Fatal(err)
	}
	if omitted == 0 || held[0].Digest != last {
		t.Fatalf("the section kept %d images, %d left out, first %s: want the planned %s first", len(held), omitted, held[0].Digest, last)
	}
}

// TestFittingFindsTheLongestRunThatFits: for stored sizes that grow evenly, unevenly and
// in one step, fitting answers the count a walk over every count finds, packing at most
// 3 times more than a bisection would, and within 4 packings for an even growth.
func TestFittingFindsTheLongestRunThatFits(t *testing.T) {
	const max = sectionpack.MaxData
	for name, c := range map[string]struct {
		n    int
		size func(n int) int
		even bool
	}{
		"even":         {300, func(n int) int { return 10 + n*(max/37) }, true},
		"even, many":   {20000, func(n int) int { return 10 + n*(max/12345) }, true},
		"uneven":       {300, func(n int) int { return 10 + n*n*(max/900) }, false},
		"one step":     {300, func(n int) int { return 10 + (n/250)*2*max + n }, false},
		"one fits":     {300, func(n int) int { return 10 + min(n, 2)*(max*2/3) }, false},
		"none but one": {2, func(n int) int { return 10 + n*(max*2/3) }, true},
	} {
		want := 0
		for k := 1; k <= c.n; k++ {
			if c.size(k) <= max {
				want = k
			}
		}
		packings := 0
		got := fitting(c.n, c.size(c.n), func(n int) int { packings++; return c.size(n) })
		bound := 3 + bits.Len(uint(c.n)) + 1
		if c.even {
			bound = 4
		}
		if got != want || packings > bound {
			t.Errorf("%s: %d entries fit in %d packings; want %d in at most %d", name, got, packings, want, bound)
		}
	}
}
