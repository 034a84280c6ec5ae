package metal

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/join"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/google/go-cmp/cmp"
)

// agentPolicy is pool gpu's policy with its machines running the agent, as the harness
// creates it; outOfBand the same pool with agent: none.
var (
	agentPolicy = store.PoolPolicy{HardwareProfile: "gpu-redfish"}
	outOfBand   = store.PoolPolicy{HardwareProfile: "gpu-redfish", Agent: store.AgentNone}
)

// offers is what node offers now.
func (h *harness) offers(node string) []Request {
	h.t.Helper()
	var offers []Request
	if err := h.store.View(func(tx *store.Tx) (err error) { offers, err = Offers(tx, h.node(node)); return err }); err != nil {
		h.t.Fatal(err)
	}
	return offers
}

// TestRetryAfterThePoolsAgentChanged: a retry runs the failed run's frozen document, the
// profile of the agent mode its pool had then. Once the pool's agent changed, that is
// the wrong workflow: an out-of-band release (no wipe) retried on a pool whose machines
// now run the agent would make the node ready with the disks its user left, and an
// agent release retried on a pool with agent: none can only fail at
// metal.ensureRamdisk. The retry is INVALID_STATE and not offered; a release runs the
// pool's profile.
func TestRetryAfterThePoolsAgentChanged(t *testing.T) {
	for name, tc := range map[string]struct {
		failing          string
		during, after    store.PoolPolicy
		failed, released string
	}{
		"out of band, then the agent": {proto.CommandMediaEject, outOfBand, agentPolicy, "metal-release-oob", "metal-release"},
		"the agent, then out of band": {proto.CommandDiskWipe, agentPolicy, outOfBand, "metal-release", "metal-release-oob"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			node := h.inState(store.NodeActive)
			h.setPolicy(tc.during)
			h.machine.answers[tc.failing] = func(json.RawMessage) (json.RawMessage, error) {
				return nil, proto.Errorf(proto.DriverError, "the BMC answered 500")
			}
			run, _, err := h.act(node, Release, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if run, n := h.end(run.ID); n.State != store.NodeFailed || run.Profile.ID != tc.failed {
				t.Fatalf("the release: %s of %s, node %s", run.State, run.Profile.ID, n.State)
			}
			delete(h.machine.answers, tc.failing)
			h.setPolicy(tc.after)
			h.machine.forget()

			before := h.node(node)
			if slices.Contains(h.offers(node), Retry) {
				t.Errorf("the node offers retry: %v", h.offers(node))
			}
			retry, _, err := h.act(node, Retry, Options{})
			if proto.CodeOf(err) != proto.InvalidState || proto.AsError(err).Details.Reason != store.NodeFailed {
				retried, n := h.end(retry.ID)
				t.Fatalf("retry after the pool's agent changed: %v; it ran %s, node %s, %d disk.wipe sent", err, retried.Profile.ID, n.State, len(h.machine.received(proto.CommandDiskWipe)))
			}
			if after := h.node(node); after.Rev != before.Rev {
				t.Errorf("the refused retry changed the node: rev %d, was %d", after.Rev, before.Rev)
			}
			o := Options{}
			if tc.after.Agent == store.AgentNone {
				o.Wipe = proto.WipeNone
			}
			if run, _, err = h.act(node, Release, o); err != nil {
				t.Fatal(err)
			}
			if run, n := h.end(run.ID); n.State != store.NodeReady || run.Profile.ID != tc.released {
				t.Errorf("the release: %s of %s, node %s %+v", run.State, run.Profile.ID, n.State, n.Failure)
			}
		})
	}
}

// TestAReleaseThatWipedNothingIsNoDeployOnAnAgentPool: on a pool whose machines run the
// agent a node is ready only after a wipe the registry attested. A release on a pool
// with agent: none wipes nothing; the node records it, and once its pool runs the agent
// it is not deployed (INVALID_STATE, nothing changed) until a commissioning wipes it:
// a node whose release's wipe was not attested cannot reach the next deploy by a detour
// through agent: none.
func TestAReleaseThatWipedNothingIsNoDeployOnAnAgentPool(t *testing.T) {
	h := newHarness(t)
	node := h.inState(store.NodeActive)
	h.machine.answers[proto.CommandDiskWipe] = func(json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"attested":false,"reason":"disk sda failed its read-back"}`), nil
	}
	run, _, err := h.act(node, Release, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, n := h.end(run.ID); n.State != store.NodeFailed || n.Failure.Error.Code != proto.UnverifiedWipe {
		t.Fatalf("release with an unattested wipe: node %s %+v", n.State, n.Failure)
	}
	delete(h.machine.answers, proto.CommandDiskWipe)

	h.setPolicy(outOfBand)
	if run, _, err = h.act(node, Release, Options{}); err != nil {
		t.Fatal(err)
	}
	run, n := h.end(run.ID)
	if n.State != store.NodeReady || run.Profile.ID != "metal-release-oob" || n.UnwipedRelease != run.ID {
		t.Fatalf("the out-of-band release: %s of %s, node %s %+v, unwiped release %q", run.State, run.Profile.ID, n.State, n.Failure, n.UnwipedRelease)
	}
	h.setPolicy(agentPolicy)
	h.machine.forget()
	if slices.Contains(h.offers(node), Deploy) {
		t.Errorf("the node offers deploy: %v", h.offers(node))
	}
	before := h.node(node)
	deploy, err := h.deploy(node, "testdata/deploy-only.json")
	if proto.CodeOf(err) != proto.InvalidState || proto.AsError(err).Details.Reason != store.NodeReady {
		h.end(deploy.ID)
		t.Fatalf("deploying a node its release did not wipe: %v; %d disk.wipe sent", err, len(h.machine.received(proto.CommandDiskWipe)))
	}
	if after := h.node(node); after.Rev != before.Rev {
		t.Errorf("the refused deploy changed the node: rev %d, was %d", after.Rev, before.Rev)
	}

	// A commissioning's attested wipe clears it.
	if run, _, err = h.act(node, Commission, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, n = h.end(run.ID); n.State != store.NodeReady || n.UnwipedRelease != "" {
		t.Fatalf("after the commissioning: node %s %+v, unwiped release %q", n.State, n.Failure, n.UnwipedRelease)
	}
	if diff := cmp.Diff([]string{`{"mode":"quick"}`}, inputs(h.machine.received(proto.CommandDiskWipe))); diff != "" {
		t.Errorf("disk.wipe (-want +got):\n%s", diff)
	}
	if deploy, err = h.deploy(node, "testdata/deploy-only.json"); err != nil {
		t.Fatal(err)
	}
	if _, n = h.end(deploy.ID); n.State != store.NodeActive {
		t.Errorf("deploy after the commissioning: node %s %+v", n.State, n.Failure)
	}
}

// inputs are the inputs of rs.
func inputs(rs []relayed) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Input)
	}
	return out
}

// TestARetriedDeployOfAnUnwipedNode: a deploy that failed on a pool with agent: none, of
// a node its release did not wipe, retried once the pool runs the agent, is refused as
// the deploy itself would be: the retry runs no deploy the lifecycle would not start.
func TestARetriedDeployOfAnUnwipedNode(t *testing.T) {
	h := newHarness(t)
	node := h.inState(store.NodeActive)
	h.setPolicy(outOfBand)
	run, _, err := h.act(node, Release, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, n := h.end(run.ID); n.State != store.NodeReady {
		t.Fatalf("the out-of-band release: node %s %+v", n.State, n.Failure)
	}
	h.machine.answers[proto.CommandDeployImage] = func(json.RawMessage) (json.RawMessage, error) {
		return nil, proto.Errorf(proto.DriverError, "the disk went read-only")
	}
	deploy, err := h.deploy(node, "testdata/deploy-only.json")
	if err != nil {
		t.Fatalf("a deploy on the pool with agent: none: %v", err)
	}
	if _, n := h.end(deploy.ID); n.State != store.NodeFailed || n.FailedFrom != store.NodeDeploying {
		t.Fatalf("the deploy: node %s from %s", n.State, n.FailedFrom)
	}
	delete(h.machine.answers, proto.CommandDeployImage)
	h.setPolicy(agentPolicy)
	before := h.node(node)
	retry, _, err := h.act(node, Retry, Options{})
	if proto.CodeOf(err) != proto.InvalidState || proto.AsError(err).Details.Reason != store.NodeFailed {
		_, n := h.end(retry.ID)
		t.Fatalf("retrying the deploy on the pool that runs the agent: %v; node %s", err, n.State)
	}
	if after := h.node(node); after.Rev != before.Rev || slices.Contains(h.offers(node), Retry) {
		t.Errorf("the refused retry: node rev %d (was %d), offers %v", after.Rev, before.Rev, h.offers(node))
	}
}

// mintingRamdisk mints each ramdisk boot's join token as the registry does
// (join.MintToken): none for a node whose identity is revoked.
type mintingRamdisk struct{}

func (mintingRamdisk) Prepare(tx *store.Tx, node store.Node, run string) (proto.PrepareRamdisk, error) {
	_, bearer, err := join.MintToken(tx, store.TokenFor{Kind: store.TokenRamdisk, NodeID: node.ID, Site: node.Site, Workflow: run}, 0)
	return proto.PrepareRamdisk{MACs: node.MACs, Token: bearer, Registry: "https://registry.test", Args: []string{"bc.node=" + node.ID}}, err
}

func (mintingRamdisk) Joinable(context.Context, string) error { return nil }

// revokedThenFailed retires node, whose metal.revokeIdentity succeeds and whose cleanup
// fails, and returns that retire's run: the node is failed from retiring with its
// identity revoked. From then on, the site's cleanup works, each ramdisk boot's join
// token is minted as the registry does (none, the identity revoked), and the retire's
// ramdisk is gone: it joined before the machine was powered off.
func (h *harness) revokedThenFailed(node string) store.Run {
	h.t.Helper()
	h.machine.answers[proto.CommandBootCleanUp] = func(json.RawMessage) (json.RawMessage, error) {
		return nil, proto.Errorf(proto.Unavailable, "the site's TFTP directory is read-only")
	}
	run, _, err := h.act(node, Retire, Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	run, n := h.end(run.ID)
	if n.State != store.NodeFailed || n.FailedFrom != store.NodeRetiring || n.IdentityRevokedAt.IsZero() || run.Failure.Step != "cleanup[0]" {
		h.t.Fatalf("the retire: node %s from %s, identity revoked at %v, failure %+v", n.State, n.FailedFrom, n.IdentityRevokedAt, run.Failure)
	}
	delete(h.machine.answers, proto.CommandBootCleanUp)
	h.svc.cfg.Ramdisk = mintingRamdisk{}
	h.clock.Advance(time.Minute)
	return run
}

// TestARetireThatRevokedOnlyRetires: a retire whose metal.revokeIdentity succeeded but
// whose cleanup failed leaves the node failed with its identity revoked for good: no
// ramdisk of it joins again (its join token is not minted: FORBIDDEN at
// metal.ensureRamdisk), so a release cannot wipe it, and out of band it would make a
// retired machine ready. The node takes and offers retry (of the retire) and retire
// only, which retire it.
func TestARetireThatRevokedOnlyRetires(t *testing.T) {
	for _, req := range []Request{Retry, Retire} {
		t.Run(string(req), func(t *testing.T) {
			h := newHarness(t)
			node := h.inState(store.NodeActive)
			h.revokedThenFailed(node)

			if diff := cmp.Diff([]Request{Retry, Retire}, h.offers(node)); diff != "" {
				t.Errorf("the node offers (-want +got):\n%s", diff)
			}
			for _, policy := range []store.PoolPolicy{outOfBand, agentPolicy} {
				h.setPolicy(policy)
				before := h.node(node)
				release, _, err := h.act(node, Release, Options{})
				if proto.CodeOf(err) != proto.InvalidState || proto.AsError(err).Details.Reason != store.NodeFailed {
					_, n := h.end(release.ID)
					t.Fatalf("release of a node whose identity is revoked (agent %q): %v; node %s %+v", policy.Agent, err, n.State, n.Failure)
				}
				if after := h.node(node); after.Rev != before.Rev {
					t.Errorf("the refused release changed the node: rev %d, was %d", after.Rev, before.Rev)
				}
			}
			h.setPolicy(agentPolicy)
			run, _, err := h.act(node, req, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, n := h.end(run.ID); n.State != store.NodeRetired {
				t.Errorf("%s: node %s %+v", req, n.State, n.Failure)
			}
		})
	}
}

// TestARetriedRetireKeepsItsWipe: a retire whose metal.revokeIdentity succeeded and
// whose cleanup failed is retried. The retry's ramdisk cannot join (the identity is
// revoked: no join token is minted), so its disk.wipe fails at once; the node is retired
// with the wipe of the retire that revoked it: none unverified when that wipe was
// attested, and that wipe's failure (its workflow and step) when it was not. Before, the
// retry recorded its own wipe, which could not run, as unverified, whatever the first
// wipe did.
func TestARetriedRetireKeepsItsWipe(t *testing.T) {
	for name, first := range map[string]string{
		"attested":     `{"attested":true}`,
		"not attested": `{"attested":false,"reason":"the signature does not verify"}`,
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			node := h.inState(store.NodeActive)
			h.machine.answers[proto.CommandDiskWipe] = func(json.RawMessage) (json.RawMessage, error) { return json.RawMessage(first), nil }
			want := unverifiedWipe(h.revokedThenFailed(node))

			retry, _, err := h.act(node, Retry, Options{})
			if err != nil {
				t.Fatal(err)
			}
			retry, n := h.end(retry.ID)
			if n.State != store.NodeRetired {
				t.Fatalf("the retry: node %s %+v", n.State, n.Failure)
			}
			if unverifiedWipe(retry) == nil {
				t.Fatal("the retry's wipe ran: the test meant a ramdisk that cannot join")
			}
			if got := wipeOf(n.UnverifiedWipe); got != wipeOf(want) {
				t.Errorf("the retired node's unverified wipe is %s, want the first retire's, %s", got, wipeOf(want))
			}
		})
	}
}

// wipeOf is an unverified wipe as text: its workflow, its step and its error.
func wipeOf(f *store.StepFailure) string {
	if f == nil {
		return "none"
	}
	return fmt.Sprintf("workflow %s %s: %v", f.RunID, f.Step, f.Error)
}
