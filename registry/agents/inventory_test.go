package agents

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/google/go-cmp/cmp"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// The byte budgets of a site agent's sections (agent/site, docs/site.md#section-budgets).
const (
	imagesBudget      = 1536 << 10
	bootEntriesBudget = 1 << 20
	discoveriesBudget = 512 << 10
)

// filled is a JSON array of entry(0), entry(1), ... as long as it stays within budget,
// as a site agent cuts a section.
func filled[T any](budget int, entry func(i int) T) json.RawMessage {
	out := []byte{'['}
	for i := 0; ; i++ {
		b, _ := json.Marshal(entry(i))
		if i > 0 {
			b = append([]byte{','}, b...)
		}
		if len(out)+len(b)+1 > budget {
			return append(out, ']')
		}
		out = append(out, b...)
	}
}

func randomHex(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return hex.EncodeToString(b)
}

// floodedSite is a site agent's hello inventory with every section at its budget, as a
// busy site reports it: images of random digests pulled from a few sources each, a boot
// entry for each of thousands of machines, the discoveries of machines booting unknown.
func floodedSite(r *rand.Rand) map[string]json.RawMessage {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	images := filled(imagesBudget, func(i int) proto.ImageCacheEntry {
		return proto.ImageCacheEntry{Digest: randomHex(r, 32), State: proto.CacheReady, SizeBytes: 1<<30 + int64(r.IntN(1<<30)),
			LastUsed: at.Add(time.Duration(r.IntN(1e6)) * time.Second), Sources: []string{
				fmt.Sprintf("https://images.example.com/tenant-%d/ubuntu-24.04-gpu-%d.qcow2", i%40, i),
				fmt.Sprintf("oci://registry.example.com/tenant-%d/ubuntu:24.04-gpu-%d", i%40, i)}}
	})
	entries := filled(bootEntriesBudget, func(i int) proto.BootEntry {
		return proto.BootEntry{Node: fmt.Sprintf("nd_%016x", r.Uint64()), MACs: []string{fmt.Sprintf("52:54:00:%02x:%02x:%02x", i>>16&255, i>>8&255, i&255)},
			ProductUUID: fmt.Sprintf("%s-%s-%s-%s-%s", randomHex(r, 4), randomHex(r, 2), randomHex(r, 2), randomHex(r, 2), randomHex(r, 6)),
			Kind:        proto.BootRamdisk, Ramdisk: &proto.RamdiskBoot{Registry: "https://registry.example.com:8443",
				Pins: []string{"sha256/" + randomHex(r, 16), "sha256/" + randomHex(r, 16), "sha256/" + randomHex(r, 16)}}}
	})
	discoveries := filled(discoveriesBudget, func(i int) proto.Discovery {
		arch := uint16(7)
		return proto.Discovery{MAC: fmt.Sprintf("52:55:00:%02x:%02x:%02x", i>>16&255, i>>8&255, i&255), ProductUUID: randomHex(r, 16), Arch: &arch,
			FirstSeen: at.Add(time.Duration(i) * time.Minute), LastSeen: at.Add(time.Duration(i) * time.Hour)}
	})
	site, _ := json.Marshal(proto.SiteInventory{HTTPBase: "http://10.0.0.1:8080", Omitted: map[string]int{proto.SectionImages: 1200, proto.SectionBootEntries: 9000}})
	return map[string]json.RawMessage{proto.SectionSite: site, proto.SectionImages: images, proto.SectionBootEntries: entries, proto.SectionDiscoveries: discoveries}
}

// randomImages is an images section of entries whose sources are as good as random
// (16 of 2 KB each, as tenant beta can make a site's cache verify them), the last one's
// shorter so that the section comes within 10 bytes of its budget: within it, but too
// large stored even compressed, and larger than one etcd transaction takes as it is.
func randomImages(r *rand.Rand) json.RawMessage {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	source := func(n int) string {
		b := []byte("https://beta.example.com/")
		for len(b) < n {
			b = append(b, letters[r.IntN(len(letters))])
		}
		return string(b)
	}
	entry := func(sources ...string) proto.ImageCacheEntry {
		return proto.ImageCacheEntry{Digest: randomHex(r, 32), State: proto.CacheReady, SizeBytes: 1, Sources: sources}
	}
	out := filled(imagesBudget, func(int) proto.ImageCacheEntry {
		e := entry()
		for range 16 {
			e.Sources = append(e.Sources, source(2048))
		}
		return e
	})
	// One entry more, of one source taking what is left but 10 bytes.
	short, _ := json.Marshal(entry(source(64)))
	last, _ := json.Marshal(entry(source(64 + imagesBudget - 10 - len(out) - 1 - len(short))))
	return append(append(append(out[:len(out)-1:len(out)-1], ','), last...), ']')
}

func siteEndpoint(st *store.Store) (*Endpoint, *session) {
	e := &Endpoint{cfg: Config{Store: st}, log: slog.New(slog.DiscardHandler)}
	return e, newSession(storetest.Site, proto.RoleSite)
}

// newSession is a session of the agent of node in role, as serve makes it, without its
// connection.
func newSession(node string, role proto.Role) *session {
	return &session{identity: identity{node: node, role: role}, reports: reports{pace: newPace()}}
}

func storedSections(t *testing.T, st *store.Store) map[string]store.InventorySection {
	t.Helper()
	out := map[string]store.InventorySection{}
	err := st.View(func(tx *store.Tx) error {
		inv, err := tx.Inventory(storetest.Site)
		for _, s := range inv {
			out[s.Section] = s
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func compact(t *testing.T, data json.RawMessage) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestAFloodedSiteSaysHelloOnEtcd: a site agent whose sections are all at their budgets
// (3 MiB in all) says hello, on a registry on etcd as on bbolt, and every section is
// stored as sent. Before, the hello was recorded in one transaction, which etcd refuses
// above its --max-request-bytes (1.5 MiB by default): the hello failed, the session
// ended, and the agent failed again at every reconnect.
func TestAFloodedSiteSaysHelloOnEtcd(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			st := b.Open(t, store.Options{})
			storetest.Fill(t, st)
			e, s := siteEndpoint(st)
			inv := floodedSite(rand.New(rand.NewPCG(1, 2)))
			total := 0
			for _, data := range inv {
				total += len(data)
			}
			if err := e.hello(s, &proto.Hello{ObservedGeneration: 1, Inventory: inv}); err != nil {
				t.Fatalf("the hello of a site whose sections are at their budgets (%d bytes): %v", total, err)
			}
			stored := storedSections(t, st)
			for section, data := range inv {
				got, ok := stored[section]
				if !ok || got.Refused != nil || !bytes.Equal(got.Data, compact(t, data)) {
					t.Errorf("section %s (%d bytes): stored %v, refused %+v; want it as sent", section, len(data), ok, got.Refused)
				}
			}
			// Said again, the same hello writes nothing and goes on.
			if err := e.hello(s, &proto.Hello{ObservedGeneration: 1, Inventory: inv}); err != nil {
				t.Fatalf("the same hello again: %v", err)
			}
		})
	}
}

// TestASectionTooLargeAloneIsRefused: tenant beta fills a site's images section with
// sources as good as random, too large to store even in a transaction of its own. Sent
// alone, it is refused (INVALID_INPUT at inventory.images), its copy stored before
// stays, marked as refused with when and how large, and the session goes on; in a hello,
// the hello still succeeds and stores the other sections, the images section refused
// the same way; a report that fits again is stored and loses the mark. Before, on etcd
// the section alone ended the session (and its hello failed at every reconnect); on
// bbolt it was stored, as nothing on etcd could.
func TestASectionTooLargeAloneIsRefused(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			st := b.Open(t, store.Options{})
			storetest.Fill(t, st)
			e, s := siteEndpoint(st)
			r := rand.New(rand.NewPCG(3, 4))
			before := json.RawMessage(`[{"digest":"` + randomHex(r, 32) + `","state":"ready","sizeBytes":1}]`)
			if err := e.hello(s, &proto.Hello{Inventory: map[string]json.RawMessage{proto.SectionImages: before}}); err != nil {
				t.Fatal(err)
			}

			inv := floodedSite(r)
			inv[proto.SectionImages] = randomImages(r)
			if n := len(inv[proto.SectionImages]); n > imagesBudget || n < imagesBudget-16 || !json.Valid(inv[proto.SectionImages]) {
				t.Fatalf("beta's images section takes %d bytes: want valid JSON within 16 bytes of its budget", n)
			}
			// The section sent alone: refused with its path, the session goes on.
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("the section sent alone ended the session: %v", p)
					}
				}()
				err := e.inventory(s, &proto.Inventory{Section: proto.SectionImages, Data: inv[proto.SectionImages]})
				if proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "inventory.images" {
					t.Fatalf("the images section sent alone: %v; want INVALID_INPUT at inventory.images", err)
				}
			}()
			if s.over() {
				t.Fatal("the session ended at a refused section")
			}
			if got := storedSections(t, st)[proto.SectionImages]; !bytes.Equal(got.Data, before) || got.Refused == nil || got.Refused.Bytes != len(inv[proto.SectionImages]) {
				t.Fatalf("images after the section alone: %.80s, refused %+v; want the copy before, marked refused at %d bytes", got.Data, got.Refused, len(inv[proto.SectionImages]))
			}

			// In a hello: the other sections are stored, the images section refused again.
			if err := e.hello(s, &proto.Hello{ObservedGeneration: 2, Inventory: inv}); err != nil {
				t.Fatalf("the hello with an images section too large to store: %v; want it recorded without that section", err)
			}
			stored := storedSections(t, st)
			images := stored[proto.SectionImages]
			if !bytes.Equal(images.Data, before) || images.Refused == nil || images.Refused.Bytes != len(inv[proto.SectionImages]) {
				t.Fatalf("images after the refused report: %.80s, refused %+v; want the copy before, marked refused at %d bytes", images.Data, images.Refused, len(inv[proto.SectionImages]))
			}
			for _, section := range []string{proto.SectionSite, proto.SectionBootEntries, proto.SectionDiscoveries} {
				if got := stored[section]; !bytes.Equal(got.Data, compact(t, inv[section])) {
					t.Errorf("section %s beside the refused one: not stored as sent", section)
				}
			}

			// Back within what one transaction takes: stored, the mark gone.
			after := json.RawMessage(`[]`)
			if err := e.inventory(s, &proto.Inventory{Section: proto.SectionImages, Data: after}); err != nil {
				t.Fatal(err)
			}
			if got := storedSections(t, st)[proto.SectionImages]; string(got.Data) != "[]" || got.Refused != nil {
				t.Fatalf("images reported whole again: %s, refused %+v", got.Data, got.Refused)
			}
		})
	}
}

// TestAHelloOfASectionWholeAgainStoresItBeforeTheSiteSection: a site agent's stored
// `images` section is cut and its stored `site` section says so; its next hello reports
// images whole and a `site` section saying so. The images section is committed before
// the `site` section, on etcd as on bbolt: at no moment does the store hold a `site`
// section saying images whole beside the cut copy, from which a cache report would drop
// the image locations that copy left out. Before, the `site` section went first, with
// the generation, and the large images section after it.
func TestAHelloOfASectionWholeAgainStoresItBeforeTheSiteSection(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			st := b.Open(t, store.Options{})
			storetest.Fill(t, st)
			var committed []string
			e, s := siteEndpoint(st)
			e.cfg.OnInventory = func(_, section string, _ json.RawMessage) { committed = append(committed, section) }
			r := rand.New(rand.NewPCG(5, 6))
			images := func(n int) json.RawMessage {
				return filled(n, func(int) proto.ImageCacheEntry {
					return proto.ImageCacheEntry{Digest: randomHex(r, 32), State: proto.CacheReady, SizeBytes: 1}
				})
			}
			site := func(omitted map[string]int) json.RawMessage {
				data, _ := json.Marshal(proto.SiteInventory{HTTPBase: "http://10.0.0.1:8080", Omitted: omitted})
				return data
			}
			cut := map[string]json.RawMessage{proto.SectionSite: site(map[string]int{proto.SectionImages: 40}), proto.SectionImages: images(2 * helloAlone)}
			if err := e.hello(s, &proto.Hello{ObservedGeneration: 1, Inventory: cut}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{proto.SectionSite, proto.SectionImages}, committed); diff != "" {
				t.Fatalf("a hello of images cut further committed (-want +got):\n%s", diff)
			}

			committed = nil
			whole := map[string]json.RawMessage{proto.SectionSite: site(nil), proto.SectionImages: images(3 * helloAlone)}
			if err := e.hello(s, &proto.Hello{ObservedGeneration: 1, Inventory: whole}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{proto.SectionImages, proto.SectionSite}, committed); diff != "" {
				t.Fatalf("a hello of images whole again committed (-want +got):\n%s", diff)
			}
			stored := storedSections(t, st)
			for section, data := range whole {
				if !bytes.Equal(stored[section].Data, compact(t, data)) {
					t.Errorf("section %s: not stored as sent", section)
				}
			}
		})
	}
}
