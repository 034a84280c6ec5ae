package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/better-compute/better-compute/testkit"
)

// TestWaitAgentJoinedSiteThroughTheRegistry: a registry's workflow whose wait.agentJoined
// has role site, started while the site agent (joined with a site token, over real QUIC)
// is stopped, waits; it completes once the site agent's session opens again. Before, the
// site agent's session was recorded as its site's, never as a join of the node, and the
// step waited until its timeout (15 minutes).
func TestWaitAgentJoinedSiteThroughTheRegistry(t *testing.T) {
	f := startBusyFleet(t)
	ctx := t.Context()
	site := f.newAgent("rack-a", f.raceJoin(store.TokenSite, "rack-a", "site"))
	end := site.session(ctx, site.start()) // it answers the enrollment's BMC reads
	c := f.tenants[busyTenants[0]]
	node, ok := f.enrollReady(c, 0, 1)
	if !ok {
		t.FailNow()
	}
	end()
	connected := func() (open bool) {
		f.r.st.View(func(tx *store.Tx) error {
			s, _, err := tx.AgentSession("rack-a")
			open = s.Connected
			return err
		})
		return open
	}
	f.wait("the site agent's session recorded as ended", func() bool { return !connected() })

	f.must(c.Call(ctx, "profiles.create", api.CreateProfileRequest{Document: api.Document(
		`{"id": "site-up", "version": 1, "target": "metal", "steps": [{"use": "wait.agentJoined", "with": {"role": "site"}}]}`)}, nil), "profiles.create")
	started, err := call[api.DeployStarted](c, "metal.deploy", api.DeployRequest{NodeID: node.ID, ProfileID: "site-up"})
	if !f.must(err, "metal.deploy") {
		t.FailNow()
	}
	run := func() api.WorkflowView {
		wf, err := call[api.WorkflowView](c, "workflows.get", api.GetWorkflowRequest{ID: started.WorkflowID})
		f.must(err, "workflows.get")
		return wf
	}
	f.wait("the wait for the site agent to start", func() bool { wf := run(); return wf.Steps[0].State == store.StepRunning })
	time.Sleep(300 * time.Millisecond)
	if wf := run(); wf.State != store.RunRunning {
		t.Fatalf("with the site agent stopped the run %s: %+v", wf.State, wf.Failure)
	}

	defer site.session(context.Background(), site.start())()
	f.wait("the run to end once the site agent is back", func() bool { return run().State != store.RunRunning })
	if wf := run(); wf.State != store.RunSucceeded {
		t.Errorf("the run %s: %+v", wf.State, wf.Failure)
	}
}

// TestACutCacheReportStaysWithinAFrame: the host of site rack-a is taken, and its
// `bcd site` key (joined for real) reports over real QUIC, through the real session code,
// a `site` section saying its `images` section is cut, then one `images` section after
// another, each within a frame and stored compressed within the section's bound: a
// hundred images of 16 sources of 2 KB, new digests each time. The registry keeps a cut
// report's entries beside those of the agent's last report that it does not name; the
// cache report it stores for the site stays within a frame, however many reports come.
// Before, it kept them up to 4096 images in all, whatever their bytes: the record grew
// by each report's 3 MiB, to more than 100 MiB, read and written again at every report.
func TestACutCacheReportStaysWithinAFrame(t *testing.T) {
	f := startBusyFleet(t)
	ctx := t.Context()
	agent := f.newAgent("rack-a", f.raceJoin(store.TokenSite, "rack-a", "site"))
	s := agent.start()
	s.SetInventory(proto.SectionSite, json.RawMessage(`{"httpBase":"http://10.0.0.2:8080","omitted":{"images":1}}`))
	defer agent.session(ctx, s)()
	stored := func() (images []proto.ImageCacheEntry) {
		f.must(f.r.st.View(func(tx *store.Tx) error {
			reports, err := tx.SiteCacheReports("rack-a")
			for _, r := range reports {
				images = r.Images
			}
			return err
		}), "reading rack-a's cache report")
		return images
	}
	const rounds, perReport = 8, 100
	for round := range rounds {
		entries := make([]proto.ImageCacheEntry, perReport)
		for i := range entries {
			e := proto.ImageCacheEntry{Digest: fmt.Sprintf("%064x", round*perReport+i+1), State: proto.CacheReady, SizeBytes: 1}
			for j := range proto.MaxImageCacheSources {
				src := fmt.Sprintf("https://images.example.com/%d/%d/%d/", round, i, j)
				e.Sources = append(e.Sources, src+strings.Repeat("a", 2048-len(src)))
			}
			entries[i] = e
		}
		data, err := json.Marshal(entries)
		if err != nil {
			t.Fatal(err)
		}
		s.SetInventory(proto.SectionImages, data)
		last := entries[perReport-1].Digest
		if !f.wait(fmt.Sprintf("report %d recorded", round), func() bool {
			return slices.ContainsFunc(stored(), func(e proto.ImageCacheEntry) bool { return e.Digest == last })
		}) {
			t.FailNow()
		}
	}
	images := stored()
	b, err := proto.Marshal(images)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > proto.MaxFrame {
		t.Errorf("rack-a's stored cache report holds %d images in %d bytes, more than a frame (%d)", len(images), len(b), proto.MaxFrame)
	}
}

// TestASiteAgentsDiscoveriesAreReadAsASiteKeepsThem: the host of site rack-a is taken,
// and its `bcd site` key (joined for real) reports over real QUIC, through the real
// session code, a `discoveries` section no site keeps: 5,000 machines with the product
// UUID of a machine enrolled at rack-a by its UUID alone, each with another MAC, and
// 15,000 with a MAC that is not one, within a frame and compressing within the section's
// bound. The registry reads it as far as a site keeps machines (proto.MaxDiscoveries)
// and logs the malformed MACs of a report in one line. Before, it wrote the machine's
// node record 5,000 times in one transaction, and logged 15,000 lines, for each such
// report, twice a second.
func TestASiteAgentsDiscoveriesAreReadAsASiteKeepsThem(t *testing.T) {
	var logged testkit.SyncBuffer
	f := serveBusy(t, Config{Log: slog.New(slog.NewTextHandler(&logged, nil))})
	f.populate()
	ctx := t.Context()
	const uuid = "4c4c4544-0000-1000-8000-0000000000a1"
	n := storetest.Node(t, f.r.st, store.Node{Tenant: "acme", Pool: "gpu", Site: "rack-a", ProductUUID: uuid})
	node := func() (n2 store.Node) {
		f.must(f.r.st.View(func(tx *store.Tx) (err error) { n2, err = tx.Node(n.ID); return err }), "reading the node")
		return n2
	}
	seen := time.Now().UTC().Truncate(time.Second)
	var list []proto.Discovery
	for i := range 5000 {
		list = append(list, proto.Discovery{MAC: fmt.Sprintf("52:54:00:aa:%02x:%02x", i>>8, i&0xff), ProductUUID: uuid, FirstSeen: seen, LastSeen: seen})
	}
	for range 15000 {
		list = append(list, proto.Discovery{MAC: "52:54:00", ProductUUID: uuid, FirstSeen: seen, LastSeen: seen})
	}
	flood, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	last, _ := json.Marshal([]proto.Discovery{{MAC: "52:54:00:bb:00:01", ProductUUID: uuid, FirstSeen: seen, LastSeen: seen}})

	agent := f.newAgent("rack-a", f.raceJoin(store.TokenSite, "rack-a", "site"))
	s := agent.start()
	s.SetInventory(proto.SectionDiscoveries, flood)
	defer agent.session(ctx, s)()
	f.wait("the flood read", func() bool { return node().MACProposal != nil })
	s.SetInventory(proto.SectionDiscoveries, last) // read after the flood
	f.wait("the report after it read", func() bool { p := node().MACProposal; return p != nil && p.MAC == "52:54:00:bb:00:01" })

	if writes := node().Rev - n.Rev; writes > proto.MaxDiscoveries+1 {
		t.Errorf("two discoveries sections wrote the node %d times", writes)
	}
	if lines := strings.Count(logged.String(), "msg="+strconv.Quote("discovery with a malformed MAC left out")); lines > 1 {
		t.Errorf("a discoveries section logged %d lines of malformed MACs", lines)
	}
}
