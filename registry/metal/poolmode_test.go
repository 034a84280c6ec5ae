package metal

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
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
