package site

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/bmc/redfishsim"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/etcdtest"
	"github.com/better-compute/better-compute/testkit"
)

// TestATenantsCachedImagesLeaveTheSiteItsHello: tenant beta, with its own credential
// and signer, registers 2,304 images of one byte from sources of 2,048 characters, 16
// sources to each of 144 artifacts, and pre-warms them at rack-a in rounds that each
// stay within its share of the site's plan, so that the site's cache verifies every
// source and keeps every artifact ready once no pool lists it any more. The cache's
// `images` section then takes more than an agent frame (4 MiB): before, the site agent
// lost its session at the report and, restarted, never said hello again, so acme's
// enrollment, whose BMC read is relayed through the site, never ended. Now each section
// is cut to its budget and the `site` section counts what it leaves out: the restarted
// site says hello, `sites inventory` shows the cut, and acme's machine is enrolled.
func TestATenantsCachedImagesLeaveTheSiteItsHello(t *testing.T) {
	files := map[string][]byte{}
	cachedImagesLeaveTheSiteItsHello(t, files, newSharedSite(t, files))
}

// TestATenantsCachedImagesLeaveTheSiteItsHelloOnEtcd: the same flood, with the registry
// on a real three-member etcd cluster. The site's hello carries its images section cut
// to its 1.5 MiB budget: before, the registry recorded the hello in one transaction,
// larger than etcd's --max-request-bytes (1.5 MiB by default) takes, so the restarted
// site's hello failed at every reconnect and acme's enrollment never ended. Now the
// section is recorded alone, compressed, and the site connects.
func TestATenantsCachedImagesLeaveTheSiteItsHelloOnEtcd(t *testing.T) {
	cluster := etcdtest.Start(t)
	files := map[string][]byte{}
	cachedImagesLeaveTheSiteItsHello(t, files, newSharedSite(t, files, "--store", "etcd", "--etcd-endpoints", strings.Join(cluster.Endpoints, ","),
		"--kek-file", filepath.Join(t.TempDir(), "kek")))
}

// cachedImagesLeaveTheSiteItsHello is the flood of TestATenantsCachedImagesLeaveTheSiteItsHello
// on the registry of s, whose source serves files.
func cachedImagesLeaveTheSiteItsHello(t *testing.T, files map[string][]byte, s sharedSite) {
	const artifacts, sourcesEach, rounds = 144, proto.MaxImageCacheSources, 6
	reg, admin, work := s.reg, s.reg.AdminConfig, s.work
	// The source's URL is known once it listens. Nothing reads files before the site
	// agent starts.
	paths := floodPaths(t, s.source.URL, s.acme, artifacts, sourcesEach)
	for d := range artifacts {
		for j := range sourcesEach {
			files[paths[d][j]] = []byte{byte(d)}
		}
	}
	sa := startSiteAgent(t, reg, work, map[string]any{"dir": filepath.Join(work, "cache"), "caFile": s.caFile})
	s.waitReady(t)

	s.keepBetasImages(t, sa, paths, rounds)

	// The site restarted holds it all: its hello must go out.
	sa.stop()
	restarted := time.Now()
	startSite(t, sa.config)
	var inv api.SiteInventory
	waitFor(t, "rack-a's agent connected again", func() bool {
		testkit.JSON(t, admin, &inv, "sites", "inventory", "rack-a")
		return inv.Session != nil && inv.Session.Connected && inv.Session.Since.After(restarted)
	})
	// The hello's images section, cut to within a few bytes of its budget, is stored
	// (the hello records it in a transaction of its own, after the session opened).
	var info proto.SiteInventory
	var images []proto.ImageCacheEntry
	imagesBytes := 0
	// The two sections are read together once they agree: a report that leaves more
	// images out stores its `site` section first, by rule, and a read between the two
	// writes sees the new count beside the images section before it.
	waitFor(t, "rack-a's images section stored up to its budget, counted by its site section", func() bool {
		testkit.JSON(t, admin, &inv, "sites", "inventory", "rack-a")
		info, images, imagesBytes = proto.SiteInventory{}, nil, 0
		for _, sec := range inv.Sections {
			switch sec.Section {
			case proto.SectionSite:
				json.Unmarshal(sec.Data, &info)
			case proto.SectionImages:
				json.Unmarshal(sec.Data, &images)
				var c bytes.Buffer
				json.Compact(&c, sec.Data)
				if imagesBytes = c.Len(); sec.Refused != nil {
					imagesBytes = 0
				}
			}
		}
		return imagesBytes >= 1536<<10-64 && len(images)+info.Omitted[proto.SectionImages] == artifacts+1
	})
	if !info.SectionCut(proto.SectionImages) || len(images) == 0 || len(images)+info.Omitted[proto.SectionImages] != artifacts+1 {
		t.Errorf("rack-a's inventory: %d images shown, omitted %v: want the images section cut, its left-out entries counted, out of %d",
			len(images), info.Omitted, artifacts+1)
	}

	// acme's enrollment reads its machine's BMC through the site.
	testkit.JSON(t, admin, nil, "sites", "update", "rack-a", "--bmc-networks", "127.0.0.1/32")
	acme := filepath.Join(work, "acme-nodes.conf")
	testkit.JSON(t, admin, nil, "credentials", "create", "--tenant", "acme", "--out", acme, "--actions",
		"compute:nodes:manage,compute:nodes:read,compute:secrets:manage")
	putSecret(t, acme, work, "secret://acme-bmc", `{"username": "admin", "password": "hunter2"}`)
	sim := redfishsim.New(redfishsim.Config{Username: "admin", Password: "hunter2"})
	t.Cleanup(sim.Close)
	pin, err := joinwire.Pin(sim.Certificate.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	node, err := enroll(t, acme, api.EnrollRequest{Pool: "acme-gpu", MACs: []string{"52:54:00:77:00:01"},
		BMC: api.BMC{Driver: "redfish", Address: sim.URL, CredentialRef: "secret://acme-bmc"}}, pin)
	if err != nil {
		t.Fatalf("acme enrolls a machine at rack-a: %v", err)
	}
	waitNode(t, acme, node.ID, store.NodeReady)
}

// floodPaths are the paths of beta's sources (artifact d's j-th at [d][j]; its content is
// the byte d), each source of 2,000 to 2,048 characters, of lengths such that the images
// section the site cuts to its 1.5 MiB budget comes within 10 bytes of it: entries of 16
// sources of 2,000 characters would leave up to one entry (32 KB) of the budget unused,
// within which the section stored fits one etcd transaction however it is stored. It
// cuts as the site does: acme's image, the one the site's plan lists, then beta's
// artifacts, all ready and never used, in digest order, as many whole entries as fit.
func floodPaths(t *testing.T, url string, acme []byte, artifacts, sourcesEach int) [][]string {
	const budget, margin, base, most = 1536 << 10, 10, 2000, 2048
	extra := make([][]int, artifacts)
	for d := range extra {
		extra[d] = make([]int, sourcesEach)
	}
	entry := func(d int) proto.ImageCacheEntry {
		if d < 0 {
			return proto.ImageCacheEntry{Digest: testkit.Digest(acme), State: proto.CacheReady, SizeBytes: int64(len(acme)), Sources: []string{url + "/acme.raw"}}
		}
		e := proto.ImageCacheEntry{Digest: testkit.Digest([]byte{byte(d)}), State: proto.CacheReady, SizeBytes: 1}
		for j := range sourcesEach {
			e.Sources = append(e.Sources, strings.Repeat("x", base+extra[d][j]))
		}
		return e
	}
	var order []int
	for d := range artifacts {
		order = append(order, d)
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(entry(a).Digest, entry(b).Digest) })
	// acme's image, the one the site's plan lists, first.
	order = append([]int{-1}, order...)
	used, kept := 1, []int{} // the opening bracket
	for i, d := range order {
		b, _ := json.Marshal(entry(d))
		n := len(b)
		if i > 0 {
			n++ // the comma
		}
		if used+n+1 > budget { // and the closing bracket
			break
		}
		used, kept = used+n, append(kept, d)
	}
	if len(kept) == len(order) {
		t.Fatal("every entry fits the budget: no cut to fill")
	}
	left := budget - (used + 1) - margin
	for _, d := range kept {
		for j := 0; d >= 0 && j < sourcesEach && left > 0; j++ {
			add := min(left, most-base)
			extra[d][j] += add
			left -= add
		}
	}
	if left > 0 {
		t.Fatalf("%d bytes of the budget left unused", left)
	}
	paths := make([][]string, artifacts)
	for d := range artifacts {
		for j := range sourcesEach {
			pad := strings.Repeat("x", base+extra[d][j]-len(url)-len("//000-00.raw"))
			paths[d] = append(paths[d], fmt.Sprintf("%s/%03d-%02d.raw", pad, d, j))
		}
	}
	return paths
}

// keepBetasImages makes the site agent sa's cache keep beta's artifacts ready: beta
// registers, for each artifact d, one image of the byte d from each of its sources
// (paths[d], on s's source), and pre-warms them in rounds, each of pools of 64 images
// within beta's share of the site's plan. Each round waits for the cache to have pulled
// or checked every source so far, then clears its pools: the images stay ready in the
// cache until it needs their room.
func (s sharedSite) keepBetasImages(t *testing.T, sa siteAgent, paths [][]string, rounds int) {
	t.Helper()
	register := s.betaImages(t)
	var refs []string
	for d := range paths {
		for j := range paths[d] {
			ref := fmt.Sprintf("b%03d-%02d@1", d, j)
			register(ref, []byte{byte(d)}, s.source.URL+"/"+paths[d][j])
			refs = append(refs, ref)
		}
	}
	perRound := len(refs) / rounds
	for r := range rounds {
		batch := refs[r*perRound : (r+1)*perRound]
		var pools []string
		for p := 0; p < len(batch); p += 64 {
			name := fmt.Sprintf("beta-%d-%d", r, p/64)
			testkit.JSON(t, s.configs["beta"], nil, "pools", "create", name, "--site", "rack-a", "--prewarm", strings.Join(batch[p:min(p+64, len(batch))], ","))
			pools = append(pools, name)
		}
		want := float64(1 + (r+1)*perRound) // acme's image, and every source so far
		testkit.WaitFor(t, fmt.Sprintf("round %d's sources pulled", r), 3*time.Minute, time.Second, func() bool {
			m, _ := testkit.Scrape(t, sa.metricsURL)
			return m[`bcd_cache_pulls_total{outcome="ready"}`] >= want
		})
		for _, name := range pools {
			testkit.JSON(t, s.configs["beta"], nil, "pools", "update", name, "--prewarm", "")
		}
	}
}
