package metal

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func rawString(r json.RawMessage) string { return string(r) }

func TestDeployTheGPUHostProfile(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(map[string]string{"nvswitch": "true"})
	run, err := h.deploy(node, "testdata/gpu-host.json")
	if err != nil {
		t.Fatal(err)
	}
	run, n := h.end(run.ID)
	if run.State != store.RunSucceeded || n.State != store.NodeActive || n.Failure != nil {
		t.Fatalf("run %s, node %s %+v", run.State, n.State, n.Failure)
	}
	want := []string{"site boot.prepareRamdisk", "site management.setBootDevice", "site power.setPower", "ramdisk deploy.image",
		"site management.setBootDevice", "ramdisk boot.kexec", "node diag.dcgm", "site boot.cleanUp"}
	if diff := cmp.Diff(want, h.machine.kinds()); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
	var in proto.DeployImage
	img := h.machine.received(proto.CommandDeployImage)[0]
	if err := json.Unmarshal([]byte(img.Input), &in); err != nil {
		t.Fatal(err)
	}
	wantIn := proto.DeployImage{Ref: "ubuntu-24.04-server@2026.09", Source: "https://images.example/ubuntu.raw.zst", ImageSources: &proto.SourceBound{Site: []string{"images.example"}},
		CacheURL: "http://rack-a.cache/sha256/" + digest, SHA256: digest, Format: "raw", Compression: "zstd", SizeBytes: 3 << 30,
		UserDataRef: "secret://userdata/" + node + "/1", UserDataKind: "cloud-init"}
	if diff := cmp.Diff(wantIn, in); diff != "" {
		t.Errorf("deploy.image (-want +got):\n%s", diff)
	}
	if img.ID != run.ID+":main.5:a1:image" {
		t.Errorf("deploy.image command id %s", img.ID)
	}
	if diff := cmp.Diff([]string{"ubuntu-24.04-server@2026.09 for acme allowUnsigned=false"}, h.images.verified); diff != "" {
		t.Errorf("verified (-want +got):\n%s", diff)
	}
	// The pool's hugepages replace the profile's and its gpu-sharing is added, in the
	// order bcd applies the units.
	wantHost := []store.HostUnit{
		{Unit: "hugepages", Settings: json.RawMessage(`{"pages1g":64}`)},
		{Unit: "nvidia-driver", Settings: json.RawMessage(`{"branch":"580"}`)},
		{Unit: "fabric-manager", Settings: json.RawMessage(`{"when":"nvswitch"}`)},
		{Unit: "gpu-sharing", Settings: json.RawMessage(`{"mode":"mps","replicas":4}`)},
	}
	if diff := cmp.Diff(wantHost, n.Host, cmp.Transformer("json", rawString)); diff != "" {
		t.Errorf("host section (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&store.ProfileRef{Tenant: "acme", ID: "ubuntu-24.04-gpu-host", Version: 1}, n.Profile); diff != "" || n.Role != "host" || n.Workflow != run.ID {
		t.Errorf("node profile %s, role %s, workflow %s", diff, n.Role, n.Workflow)
	}
	// The node's NodeSpec is its labels, bindings and host section, at generation 1.
	var spec proto.NodeSpec
	h.store.View(func(tx *store.Tx) (err error) { spec, err = tx.NodeSpec(node); return err })
	if spec.Generation != 1 || spec.Role != proto.RoleNode || spec.Labels["nvswitch"] != "true" || len(spec.Host) != len(wantHost) ||
		spec.Host[0].Unit != "hugepages" || spec.Drivers["power"].Driver != n.Drivers["power"].Driver {
		t.Errorf("NodeSpec %+v", spec)
	}
	// The version is used: it cannot change any more.
	err = h.store.Update(func(tx *store.Tx) error {
		_, err := tx.ReplaceProfileDocument("acme", "ubuntu-24.04-gpu-host", 1, 0, []byte(`{}`))
		return err
	})
	if proto.CodeOf(err) != proto.InvalidState {
		t.Errorf("replacing the deployed version: %v", err)
	}
	// An active node is released before it deploys again; the user data is rendered
	// anew.
	if _, err := h.deploy(node, "testdata/gpu-host.json"); proto.CodeOf(err) != proto.InvalidState || proto.AsError(err).Details.Reason != store.NodeActive {
		t.Fatalf("deploying an active node: %v, want INVALID_STATE, reason active", err)
	}
	release, _, err := h.act(node, Release, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, n = h.end(release.ID); n.State != store.NodeReady || n.Profile != nil || n.Host != nil {
		t.Fatalf("released: %s %+v", n.State, n.Failure)
	}
	run, err = h.deploy(node, "testdata/gpu-host.json")
	if err != nil {
		t.Fatal(err)
	}
	if run, n = h.end(run.ID); run.State != store.RunSucceeded || n.State != store.NodeActive || h.userData.calls != 2 {
		t.Errorf("redeploy: run %s, node %s, %d renders", run.State, n.State, h.userData.calls)
	}
}

func TestDeployImageRefusals(t *testing.T) {
	// ubuntu changes the catalog's ubuntu image as edit says.
	ubuntu := func(edit func(img *Image)) func(h *harness) {
		return func(h *harness) {
			img := h.images.images["ubuntu-24.04-server@2026.09"]
			edit(&img)
			h.images.images[img.Ref] = img
		}
	}
	cases := map[string]struct {
		prepare func(h *harness)
		code    proto.Code
		reason  string
		// sent is how many deploy.image commands reached the ramdisk.
		sent int
	}{
		"an iso cannot be written to disk": {
			prepare: ubuntu(func(img *Image) { img.Format = "iso" }),
			code:    proto.InvalidInput,
		},
		"an image that does not verify is never sent": {
			prepare: func(h *harness) {
				h.images.verifyErr = proto.Errorf(proto.InvalidState, "image is unsigned").WithReason("unsigned")
			},
			code: proto.InvalidState, reason: "unsigned",
		},
		"an image the tenant cannot see": {
			prepare: ubuntu(func(img *Image) { img.Tenant = "other" }),
			code:    proto.NotFound,
		},
		"a digest other than the catalog's": {
			prepare: func(h *harness) {
				h.machine.answers[proto.CommandDeployImage] = func(json.RawMessage) (json.RawMessage, error) {
					return json.RawMessage(`{"sha256":"` + strings.Repeat("0", 64) + `","bytesWritten":1}`), nil
				}
			},
			code: proto.DriverError, reason: "digest-mismatch", sent: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			node := h.enroll(nil)
			tc.prepare(h)
			run, err := h.deploy(node, "testdata/deploy-only.json")
			if err != nil {
				t.Fatal(err)
			}
			run, n := h.end(run.ID)
			if n.State != store.NodeFailed || n.Failure == nil {
				t.Fatalf("node %s, failure %+v", n.State, n.Failure)
			}
			got := fmt.Sprintf("%s %s %s %s", n.Failure.Step, n.Failure.Use, n.Failure.Error.Code, n.Failure.Error.Details.Reason)
			if want := fmt.Sprintf("steps[0] deploy.deploy %s %s", tc.code, tc.reason); got != want {
				t.Errorf("failure %q (%s), want %q", got, n.Failure.Error.Message, want)
			}
			if diff := cmp.Diff(run.Failure, n.Failure, cmpopts.IgnoreUnexported(proto.Error{})); diff != "" || n.Failure.RunID != run.ID {
				t.Errorf("the node's failure is not the run's (-run +node):\n%s", diff)
			}
			if sent := len(h.machine.received(proto.CommandDeployImage)); sent != tc.sent {
				t.Errorf("%d deploy.image sent, want %d", sent, tc.sent)
			}
		})
	}
}

// TestDeploySourceBoundBySite: a tenant's image whose source host the node's site, or
// its pool when it narrows the site's list, does not allow never reaches the ramdisk as
// a source: with the image in the site's cache (pre-warmed from an allowed source, the
// pool narrowed since) the ramdisk gets the cache alone; without, deploy.deploy fails
// FORBIDDEN (source-not-allowed) at with.image and nothing is relayed.
func TestDeploySourceBoundBySite(t *testing.T) {
	const internal = "https://10.0.0.9/admin/export.raw"
	cases := map[string]struct {
		source      string
		siteSources []string // nil: the harness's images.example
		poolSources []string
		uncached    bool
		wantSource  string
		wantMessage []string // what a refusal's message says, when it is refused
		notSaid     string   // what it does not: the site's image sources are the platform's
		wantRelayed bool
	}{
		"an allowed source, cached":              {source: internal, siteSources: []string{"10.0.0.9"}, wantSource: internal, wantRelayed: true},
		"an allowed source, not cached":          {source: internal, siteSources: []string{"10.0.0.9"}, uncached: true, wantSource: internal, wantRelayed: true},
		"a host the site does not allow, cached": {source: internal, wantRelayed: true},
		"a host the site does not allow, not cached": {source: internal, uncached: true,
			wantMessage: []string{"10.0.0.9:443", "site rack-a", "better-compute sites update rack-a --image-sources", "pre-warm"}, notSaid: "images.example"},
		"another port of an allowed host, not cached": {source: "https://images.example:8443/x.raw", uncached: true,
			wantMessage: []string{"images.example:8443"}},
		"a site without image sources, cached": {source: internal, siteSources: []string{}, wantRelayed: true},
		"a site without image sources, not cached": {source: internal, siteSources: []string{}, uncached: true,
			wantMessage: []string{"10.0.0.9:443"}},
		"a host the pool leaves out, cached": {source: internal, siteSources: []string{"10.0.0.9"}, poolSources: []string{"images.example"}, wantRelayed: true},
		"a host the pool leaves out, not cached": {source: internal, siteSources: []string{"10.0.0.9"}, poolSources: []string{"images.example"}, uncached: true,
			wantMessage: []string{"10.0.0.9:443", "pool gpu's policy.imageSources [images.example]", "pools update gpu"}},
		"a host the pool keeps": {source: internal, siteSources: []string{"10.0.0.9"}, poolSources: []string{"10.0.0.9"}, uncached: true, wantSource: internal, wantRelayed: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			node := h.enroll(nil)
			img := h.images.images["ubuntu-24.04-server@2026.09"]
			img.Source = tc.source
			h.images.images[img.Ref] = img
			h.images.uncached = map[string]bool{img.Ref: tc.uncached}
			if tc.siteSources != nil {
				storetest.Update(t, h.store, func(tx *store.Tx) error { _, err := tx.SetSiteImageSources("rack-a", tc.siteSources); return err })
			}
			if tc.poolSources != nil {
				h.setPolicy(store.PoolPolicy{ImageSources: tc.poolSources})
			}
			run, err := h.deploy(node, "testdata/deploy-only.json")
			if err != nil {
				t.Fatal(err)
			}
			_, n := h.end(run.ID)
			sent := h.machine.received(proto.CommandDeployImage)
			if !tc.wantRelayed {
				e := n.Failure
				if n.State != store.NodeFailed || e == nil || e.Error.Code != proto.Forbidden || e.Error.Details.Reason != proto.ReasonSourceNotAllowed ||
					e.Error.Details.Path != "with.image" || len(sent) != 0 {
					t.Fatalf("node %s, failure %+v, %d deploy.image sent: want FORBIDDEN source-not-allowed at with.image, nothing sent", n.State, e, len(sent))
				}
				for _, want := range tc.wantMessage {
					if !strings.Contains(e.Error.Message, want) {
						t.Errorf("the message does not say %q: %s", want, e.Error.Message)
					}
				}
				if tc.notSaid != "" && strings.Contains(e.Error.Message, tc.notSaid) {
					t.Errorf("the message shows the tenant the site's image sources (%s): %s", tc.notSaid, e.Error.Message)
				}
				return
			}
			if n.State != store.NodeActive || len(sent) != 1 {
				t.Fatalf("node %s, failure %+v, %d deploy.image sent", n.State, n.Failure, len(sent))
			}
			var in proto.DeployImage
			if err := json.Unmarshal([]byte(sent[0].Input), &in); err != nil {
				t.Fatal(err)
			}
			if in.Source != tc.wantSource || (in.CacheURL == "") != tc.uncached {
				t.Errorf("deploy.image from source %q and cache %q, want source %q", in.Source, in.CacheURL, tc.wantSource)
			}
			// With the source goes where its fetch may go, for the ramdisk to hold every
			// request and address of it to.
			var wantBound *proto.SourceBound
			if tc.wantSource != "" {
				wantBound = &proto.SourceBound{Site: tc.siteSources, Pool: tc.poolSources}
				if tc.siteSources == nil {
					wantBound.Site = []string{"images.example"}
				}
			}
			if diff := cmp.Diff(wantBound, in.ImageSources); diff != "" {
				t.Errorf("deploy.image's imageSources (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeployRefusals(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	h.machine.bootsNothing = true
	running, _, err := h.act(node, Inspect, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		node, file string
		code       proto.Code
	}{
		"a node that is inspecting":   {node, "testdata/deploy-only.json", proto.InvalidState},
		"another tenant's node":       {"nd_0000000000000000", "testdata/deploy-only.json", proto.NotFound},
		"a profile of another target": {node, "testdata/vps.json", proto.InvalidInput},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := h.deploy(tc.node, tc.file); proto.CodeOf(err) != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
		})
	}
	// Nothing the refusals did marked the versions used.
	h.store.View(func(tx *store.Tx) error {
		for _, id := range []string{"deploy-only", "a-vps"} {
			if rec, ok, _ := tx.Profile("acme", id, 1); ok && rec.Used {
				t.Errorf("%s was marked used by a refused deploy", id)
			}
		}
		return nil
	})
	// The ramdisk never joins, so metal.ensureRamdisk runs out of its 20 minutes.
	h.clock.BlockUntil(1)
	h.clock.Advance(20 * time.Minute)
	if _, n := h.end(running.ID); n.State != store.NodeFailed || n.Failure.Error.Code != proto.Timeout {
		t.Errorf("node %s, failure %+v", n.State, n.Failure)
	}
}

func TestEnsureRamdisk(t *testing.T) {
	cases := map[string]struct {
		prepare func(h *harness, node string)
		want    []string
		code    proto.Code
	}{
		"boots the machine into the ramdisk through the site": {
			want: []string{"main.0:a1:pxe site management.setBootDevice {\"device\":\"pxe\",\"persistent\":false}", `main.0:a1:prepare site boot.prepareRamdisk {"macs":["52:54:00:00:00:01"],"token":"bcj_test","registry":"https://registry.test","pins":null,"args":["bc.node=NODE"]}`,
				"main.0:a1:cycle site power.setPower {\"action\":\"cycle\"}", "main.1:a1 ramdisk inventory.refresh {}", "cleanup.0:a1 site boot.cleanUp "},
		},
		"does nothing when the ramdisk is the machine's agent": {
			// It joined as the run began: its own, as a step run again finds it.
			prepare: func(h *harness, node string) { h.clock.Advance(time.Second); h.joins.Joined(node, "ramdisk", "") },
			want:    []string{"main.1:a1 ramdisk inventory.refresh {}", "cleanup.0:a1 site boot.cleanUp "},
		},
		"a ramdisk that joined before the run began is booted again": {
			// An earlier workflow's (an inspection's, left running), whose certificate the
			// registry refuses once that workflow ended (run-ended).
			prepare: func(h *harness, node string) {
				h.joins.Joined(node, "ramdisk", "")
				h.clock.Advance(time.Second)
			},
			want: []string{"main.0:a1:pxe site management.setBootDevice {\"device\":\"pxe\",\"persistent\":false}", `main.0:a1:prepare site boot.prepareRamdisk {"macs":["52:54:00:00:00:01"],"token":"bcj_test","registry":"https://registry.test","pins":null,"args":["bc.node=NODE"]}`,
				"main.0:a1:cycle site power.setPower {\"action\":\"cycle\"}", "main.1:a1 ramdisk inventory.refresh {}", "cleanup.0:a1 site boot.cleanUp "},
		},
		"a ramdisk that joined before the machine was powered off is gone": {
			prepare: func(h *harness, node string) {
				h.joins.Joined(node, "ramdisk", "")
				h.clock.Advance(time.Second)
				h.store.Update(func(tx *store.Tx) error {
					_, err := tx.UpdateNode(node, func(n *store.Node) error { n.PoweredAt = tx.Now(); return nil })
					return err
				})
			},
			want: []string{"main.0:a1:pxe site management.setBootDevice {\"device\":\"pxe\",\"persistent\":false}", `main.0:a1:prepare site boot.prepareRamdisk {"macs":["52:54:00:00:00:01"],"token":"bcj_test","registry":"https://registry.test","pins":null,"args":["bc.node=NODE"]}`,
				"main.0:a1:cycle site power.setPower {\"action\":\"cycle\"}", "main.1:a1 ramdisk inventory.refresh {}", "cleanup.0:a1 site boot.cleanUp "},
		},
		"a pool whose machines run no agent is inspected out of band": {
			prepare: func(h *harness, node string) {
				h.store.Update(func(tx *store.Tx) error {
					_, err := tx.SetPoolPolicy("acme", "gpu", store.PoolPolicy{Agent: store.AgentNone})
					return err
				})
			},
			want: []string{"main.0:a1 site inspect.oob "},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			node := h.enroll(nil)
			h.clock.Advance(time.Second)
			if tc.prepare != nil {
				tc.prepare(h, node)
			}
			run, _, err := h.act(node, Inspect, Options{})
			if err != nil {
				t.Fatal(err)
			}
			run, n := h.end(run.ID)
			var got []string
			for _, r := range h.machine.got {
				got = append(got, fmt.Sprintf("%s %s %s %s", strings.TrimPrefix(r.ID, run.ID+":"), r.Role, r.Kind, strings.ReplaceAll(string(r.Input), node, "NODE")))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("commands (-want +got):\n%s", diff)
			}
			if tc.code == "" && n.State != store.NodeReady || tc.code != "" && (n.Failure == nil || n.Failure.Error.Code != tc.code) {
				t.Errorf("node %s, failure %+v", n.State, n.Failure)
			}
		})
	}
}

func TestRevokeIdentityAndWaitGeneration(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	var secret string
	if err := h.store.Update(func(tx *store.Tx) (err error) {
		_, secret, err = tx.CreateJoinToken(store.TokenFor{Kind: store.TokenRamdisk, NodeID: node, Site: "rack-a"}, tx.Now().Add(time.Hour))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	run, err := h.deploy(node, "testdata/deploy-only.json")
	if err != nil {
		t.Fatal(err)
	}
	h.end(run.ID)
	h.machine.forget()
	if run, _, err = h.remediate(node, ProfileRemediateReboot, ""); err != nil {
		t.Fatal(err)
	}
	if run, n := h.end(run.ID); run.State != store.RunSucceeded || n.State != store.NodeActive {
		t.Fatalf("remediate-reboot: run %s, node %s %+v", run.State, n.State, n.Failure)
	}
	h.setPolicy(store.PoolPolicy{Agent: store.AgentNone})
	if run, _, err = h.act(node, Retire, Options{}); err != nil {
		t.Fatal(err)
	}
	if run, n := h.end(run.ID); run.State != store.RunSucceeded || n.State != store.NodeRetired || run.Profile.ID != "metal-retire-oob" {
		t.Fatalf("retire: run %s of %s, node %s %+v", run.State, run.Profile.ID, n.State, n.Failure)
	}
	var n store.Node
	h.store.View(func(tx *store.Tx) (err error) { n, err = tx.Node(node); return err })
	if n.IdentityRevokedAt.IsZero() {
		t.Error("metal.revokeIdentity did not mark the identity revoked")
	}
	err = h.store.Update(func(tx *store.Tx) error { _, err := tx.ConsumeJoinToken(secret, ""); return err })
	if e := proto.AsError(err); e.Code != proto.Unauthenticated || e.Details.Reason != "token-invalid" {
		t.Errorf("the node's unused join token after revocation: %v, want it deleted (token-invalid)", err)
	}
	if diff := cmp.Diff([]string{node}, h.revoked.get()); diff != "" {
		t.Errorf("sessions ended (-want +got):\n%s", diff)
	}
	want := []string{"site power.setPower", "site power.setPower"}
	if diff := cmp.Diff(want, h.machine.kinds()); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
}

// TestEpochMovesBeforeTheRunRelays: a deploy, a release and a retire each move the node's
// identity epoch in the transaction that creates their run, and its commit tells the
// store's OnNodeIdentity hooks (the agent endpoint, which ends the sessions of the
// earlier installation's agents there, and, through the store's watch, at every other
// replica) before the run relays its first command: no command of the new installation
// is relayed while the agents of the old one are still taken for the machine's. The
// retire's metal.revokeIdentity is told too.
func TestEpochMovesBeforeTheRunRelays(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	var told []string
	var (
		epoch   int64
		revoked bool
	)
	defer h.store.OnNodeIdentity(func(n store.NodeChange) {
		// The hook is told of each workflow's start and end too; this test follows
		// the identity's moves.
		switch {
		case !n.IdentityRevokedAt.IsZero() && !revoked:
			revoked = true
			told = append(told, "revoked")
		case n.IdentityEpoch != epoch:
			epoch = n.IdentityEpoch
			told = append(told, fmt.Sprintf("epoch %d after %d commands", n.IdentityEpoch, len(h.machine.kinds())))
		}
	})()
	var want []string
	step := func(req Request, start func() (store.Run, error)) {
		t.Helper()
		want = append(want, fmt.Sprintf("epoch %d after %d commands", len(want)+1, len(h.machine.kinds())))
		run, err := start()
		if err != nil {
			t.Fatalf("%s: %v", req, err)
		}
		if run, _ := h.end(run.ID); run.State != store.RunSucceeded {
			t.Fatalf("%s: run %s", req, run.State)
		}
	}
	step(Deploy, func() (store.Run, error) { return h.deploy(node, "testdata/deploy-only.json") })
	step(Release, func() (store.Run, error) { run, _, err := h.act(node, Release, Options{}); return run, err })
	step(Retire, func() (store.Run, error) { run, _, err := h.act(node, Retire, Options{}); return run, err })
	want = append(want, "revoked")
	if diff := cmp.Diff(want, told); diff != "" {
		t.Errorf("identity changes told (-want +got):\n%s", diff)
	}
	if n := len(h.machine.kinds()); n == 0 {
		t.Error("the runs relayed no command")
	}
}

// TestDeployImageResumedAsItWasSent: the registry restarts while deploy.image is pending
// at the ramdisk, and the site's cache got the image meanwhile. The resumed deploy.deploy
// relays the deploy.image it sent before (the source alone), which the ramdisk may be
// writing already, not one that names the cache: a pending command is never given
// another input (the relay refuses that as CONFLICT). The deploy ends active.
func TestDeployImageResumedAsItWasSent(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	ref := "ubuntu-24.04-server@2026.09"
	h.images.uncached = map[string]bool{ref: true}
	h.machine.hang(proto.CommandDeployImage)
	if _, err := h.deploy(node, "testdata/deploy-only.json"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(h.machine.received(proto.CommandDeployImage)) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("deploy.image was never relayed")
		}
	}
	h.images.uncached = nil
	h.machine.mu.Lock()
	delete(h.machine.hangs, proto.CommandDeployImage)
	h.machine.mu.Unlock()
	h.restart()
	if n := h.settle(node); n.State != store.NodeActive {
		t.Fatalf("node %s, failure %+v", n.State, n.Failure)
	}
	sent := h.machine.received(proto.CommandDeployImage)
	var first proto.DeployImage
	json.Unmarshal([]byte(sent[0].Input), &first)
	if len(sent) != 2 || sent[1].ID != sent[0].ID || sent[1].Input != sent[0].Input || first.CacheURL != "" || first.Source == "" {
		t.Errorf("deploy.image relayed before and after the restart: %+v, want the same id and input twice, the source alone", sent)
	}
}
