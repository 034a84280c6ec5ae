package metal

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// inState puts a node in state as the lifecycle leaves it there: a ready node, moved
// by the table's requests; the working states with their workflow running (the
// machine's ramdisk never joins, so it runs until cancelled).
func (h *harness) inState(state string) string {
	h.t.Helper()
	node := h.enroll(nil)
	must := func(req Request) {
		h.t.Helper()
		run, _, err := h.act(node, req, Options{})
		if err != nil {
			h.t.Fatalf("%s: %v", req, err)
		}
		if _, n := h.end(run.ID); n.State == store.NodeFailed {
			h.t.Fatalf("%s: failed %+v", req, n.Failure)
		}
	}
	deploy := func() {
		h.t.Helper()
		run, err := h.deploy(node, "testdata/deploy-only.json")
		if err != nil {
			h.t.Fatal(err)
		}
		h.end(run.ID)
	}
	hang := func(req Request) {
		h.t.Helper()
		h.machine.bootsNothing = true
		if _, _, err := h.act(node, req, Options{}); err != nil {
			h.t.Fatalf("%s: %v", req, err)
		}
		// It waits for the ramdisk once it has power-cycled the machine.
		for deadline := time.Now().Add(10 * time.Second); h.node(node).PoweredAt.IsZero(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				h.t.Fatalf("%s never power-cycled the machine", req)
			}
		}
	}
	switch state {
	case store.NodeReady:
	case store.NodeEnrolling:
		// A second machine whose enrollment never ends: its BMC does not answer.
		h.machine.hang("power.getPower")
		n, _ := h.startEnroll("52:54:00:00:00:02", nil)
		return n.ID
	case store.NodeInspecting:
		hang(Inspect)
	case store.NodeCommissioning:
		hang(Commission)
	case store.NodeDeploying:
		h.machine.hang(proto.CommandDeployImage)
		if _, err := h.deploy(node, "testdata/deploy-only.json"); err != nil {
			h.t.Fatal(err)
		}
	case store.NodeActive:
		deploy()
	case store.NodeRemediating:
		deploy()
		h.machine.hang("power.setPower")
		if _, _, err := h.remediate(node, ProfileRemediateReboot, ""); err != nil {
			h.t.Fatal(err)
		}
	case store.NodeReleasing:
		deploy()
		h.machine.hang(proto.CommandDiskWipe)
		hang(Release)
	case store.NodeRetiring:
		h.machine.hang(proto.CommandDiskWipe)
		hang(Retire)
	case store.NodeRetired:
		must(Retire)
	case store.NodeRescue:
		deploy()
		must(Rescue)
	case store.NodeFailed:
		h.machine.answers["inventory.refresh"] = func(json.RawMessage) (json.RawMessage, error) {
			return nil, proto.Errorf(proto.DriverError, "machine-identity-mismatch")
		}
		run, _, err := h.act(node, Inspect, Options{})
		if err != nil {
			h.t.Fatal(err)
		}
		h.end(run.ID)
		delete(h.machine.answers, "inventory.refresh")
	default:
		h.t.Fatalf("no way to state %s", state)
	}
	if n := h.node(node); n.State != state {
		h.t.Fatalf("node is %s, want %s", n.State, state)
	}
	return node
}

// TestLifecycleTable makes every request of a node in every state: the request either
// moves the node to the state the lifecycle says, or is INVALID_STATE with the state
// as its reason and changes nothing in the store. Offers, what a console and the CLI
// offer to do next, names exactly the requests that are not refused.
func TestLifecycleTable(t *testing.T) {
	want := map[string]map[Request]string{
		store.NodeEnrolling:     {Cancel: store.NodeFailed},
		store.NodeInspecting:    {Cancel: store.NodeFailed},
		store.NodeCommissioning: {Cancel: store.NodeFailed},
		store.NodeReady:         {Inspect: store.NodeInspecting, Commission: store.NodeCommissioning, Deploy: store.NodeDeploying, Retire: store.NodeRetiring},
		store.NodeDeploying:     {Cancel: store.NodeFailed},
		store.NodeActive:        {Release: store.NodeReleasing, Retire: store.NodeRetiring, Rescue: store.NodeRescue, Remediate: store.NodeRemediating},
		store.NodeRemediating:   {Cancel: store.NodeFailed},
		store.NodeReleasing:     {Cancel: store.NodeFailed},
		store.NodeRetiring:      {Cancel: store.NodeFailed},
		store.NodeRetired:       {},
		store.NodeRescue:        {Unrescue: store.NodeRescue, Retire: store.NodeRetiring},
		store.NodeFailed:        {Retry: store.NodeInspecting, Release: store.NodeReleasing, Retire: store.NodeRetiring, Rescue: store.NodeRescue},
	}
	if len(want) != len(States()) {
		t.Fatalf("the test covers %d states of %d", len(want), len(States()))
	}
	for _, state := range States() {
		for _, req := range Requests() {
			t.Run(state+" "+string(req), func(t *testing.T) {
				h := newHarness(t)
				node := h.inState(state)
				before := h.node(node)
				var offers []Request
				if err := h.store.View(func(tx *store.Tx) (err error) { offers, err = Offers(tx, before); return err }); err != nil {
					t.Fatal(err)
				}
				var taken []Request
				for _, r := range Requests() {
					if _, ok := want[state][r]; ok {
						taken = append(taken, r)
					}
				}
				if !cmp.Equal(sortedRequests(offers), sortedRequests(taken), cmpopts.EquateEmpty()) {
					t.Errorf("a %s node offers %v, and takes %v", state, offers, taken)
				}
				var run store.Run
				var err error
				switch req {
				case Deploy:
					run, err = h.deploy(node, "testdata/deploy-only.json")
				case Remediate:
					run, _, err = h.remediate(node, ProfileRemediateReboot, "")
				default:
					run, _, err = h.act(node, req, Options{})
				}
				to, ok := want[state][req]
				if !ok {
					if e := proto.AsError(err); err == nil || e.Code != proto.InvalidState || e.Details.Reason != state {
						t.Fatalf("got %v, want INVALID_STATE with reason %s", err, state)
					}
					if diff := cmp.Diff(before, h.node(node), cmpopts.IgnoreUnexported(proto.Error{})); diff != "" {
						t.Errorf("a refused request changed the node (-before +after):\n%s", diff)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if req == Cancel {
					h.end(run.ID)
				}
				if n := h.node(node); n.State != to {
					t.Errorf("node is %s, want %s", n.State, to)
				}
			})
		}
	}
}

// ramdiskTaken is the check of a certificate of node's ramdisk at its identity epoch
// that names run, the workflow whose token it joined with (store.Tx.CheckAgent).
func (h *harness) ramdiskTaken(node, run string) error {
	h.t.Helper()
	n := h.node(node)
	return h.store.View(func(tx *store.Tx) error {
		return tx.CheckAgent(proto.AgentCredential{Node: node, Role: proto.RoleRamdisk, Epoch: n.IdentityEpoch, Run: run})
	})
}

// TestARescuesRamdiskOutlivesOnlyItsRescue walks a node through the workflows that boot
// its ramdisk with the shipped profiles: the certificate of each workflow's ramdisk is
// refused (FORBIDDEN, run-ended) once that workflow ended, but a rescue's, whose ramdisk
// the operator works in after it succeeded, until the node's next workflow (unrescue)
// begins; a rescue from failed likewise, the node's failure kept.
func TestARescuesRamdiskOutlivesOnlyItsRescue(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	ended := func(run store.Run) {
		t.Helper()
		if err := h.ramdiskTaken(node, run.ID); proto.AsError(err).Details.Reason != proto.ReasonRunEnded {
			t.Errorf("the ramdisk of the %s that ended (%s): %v, want FORBIDDEN %s", run.Kind, run.State, err, proto.ReasonRunEnded)
		}
	}
	inspect, _, err := h.act(node, Inspect, Options{})
	if err != nil {
		t.Fatal(err)
	}
	inspect, _ = h.end(inspect.ID)
	ended(inspect)
	deploy, err := h.deploy(node, "testdata/deploy-only.json")
	if err != nil {
		t.Fatal(err)
	}
	deploy, _ = h.end(deploy.ID)
	ended(deploy)
	rescue, _, err := h.act(node, Rescue, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rescue, n := h.end(rescue.ID); rescue.State != store.RunSucceeded || n.State != store.NodeRescue {
		t.Fatalf("the rescue %s, node %s", rescue.State, n.State)
	}
	if err := h.ramdiskTaken(node, rescue.ID); err != nil {
		t.Errorf("the ramdisk of the rescue that succeeded, the node in rescue: %v, want it taken", err)
	}
	unrescue, _, err := h.act(node, Unrescue, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ended(rescue)
	h.end(unrescue.ID)

	h = newHarness(t)
	node, release, _ := h.releasedPastAHiddenNamespace()
	ended(release)
	rescue, _, err = h.act(node, Rescue, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rescue, n := h.end(rescue.ID); rescue.State != store.RunSucceeded || n.State != store.NodeFailed {
		t.Fatalf("the rescue from failed %s, node %s", rescue.State, n.State)
	}
	if err := h.ramdiskTaken(node, rescue.ID); err != nil {
		t.Errorf("the ramdisk of the rescue from failed that succeeded: %v, want it taken", err)
	}
}

// TestLifecycleWalk walks a node through the states with the shipped profiles: each
// ends where the lifecycle says, and each ran the profile of its state.
func TestLifecycleWalk(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	steps := []struct {
		req     Request
		o       Options
		profile string
		state   string
	}{
		{Inspect, Options{}, "metal-inspect", store.NodeReady},
		{Commission, Options{}, "metal-commission", store.NodeReady},
		{Deploy, Options{}, "deploy-only", store.NodeActive},
		{Rescue, Options{}, "metal-rescue", store.NodeRescue},
		{Unrescue, Options{}, "metal-unrescue", store.NodeActive},
		{Release, Options{Wipe: proto.WipeSecureErase}, "metal-release", store.NodeReady},
		{Retire, Options{}, "metal-retire", store.NodeRetired},
	}
	for _, s := range steps {
		var run store.Run
		var err error
		if s.req == Deploy {
			run, err = h.deploy(node, "testdata/deploy-only.json")
		} else {
			run, _, err = h.act(node, s.req, s.o)
		}
		if err != nil {
			t.Fatalf("%s: %v", s.req, err)
		}
		run, n := h.end(run.ID)
		if n.State != s.state || run.Profile.ID != s.profile || run.Kind != string(s.req) || n.Transition != string(s.req) {
			t.Fatalf("%s: node %s (%s) after %s of %s, want %s after %s; failure %+v", s.req, n.State, n.Transition, run.Kind, run.Profile.ID, s.state, s.profile, n.Failure)
		}
	}
	// The release wiped in the mode asked, the retire crypto-erased.
	var modes []string
	for _, r := range h.machine.received(proto.CommandDiskWipe) {
		modes = append(modes, r.Input)
	}
	if diff := cmp.Diff([]string{`{"mode":"quick"}`, `{"mode":"secure-erase"}`, `{"mode":"crypto-erase"}`}, modes); diff != "" {
		t.Errorf("disk.wipe inputs (-want +got):\n%s", diff)
	}
	if n := h.node(node); n.IdentityRevokedAt.IsZero() || n.UnverifiedWipe != nil || n.Profile != nil {
		t.Errorf("retired node %+v", n)
	}
	// A shipped lifecycle profile does not run as a deploy.
	other := newHarness(t)
	if _, err := other.deployShipped(other.enroll(nil), "metal-retire@1"); proto.CodeOf(err) != proto.InvalidInput {
		t.Errorf("deploying metal-retire: %v, want INVALID_INPUT", err)
	}
}

// TestEnrollmentPolicy: a pool's policy.enrollment chains inspection and commissioning
// after enrollment before the node is ready.
func TestEnrollmentPolicy(t *testing.T) {
	for policy, want := range map[string][]string{
		"":                     {"enroll"},
		store.EnrollInspect:    {"enroll", "inspect"},
		store.EnrollCommission: {"enroll", "inspect", "commission"},
	} {
		t.Run("enrollment "+policy, func(t *testing.T) {
			h := newHarness(t)
			h.setPolicy(store.PoolPolicy{HardwareProfile: "gpu-redfish", Enrollment: policy})
			n, run := h.startEnroll("52:54:00:00:00:01", nil)
			if n.State != store.NodeEnrolling {
				t.Fatalf("enrolled as %s", n.State)
			}
			var kinds []string
			for id := run.ID; ; id = n.Workflow {
				var r store.Run
				r, n = h.end(id)
				kinds = append(kinds, r.Kind)
				if n.Workflow == id {
					break
				}
			}
			if diff := cmp.Diff(want, kinds); diff != "" || n.State != store.NodeReady {
				t.Errorf("node %s %+v, workflows (-want +got):\n%s", n.State, n.Failure, diff)
			}
		})
	}
}

// TestUnverifiedWipe: a release whose wipe is not attested fails the node with
// UNVERIFIED_WIPE instead of making it ready; another release in a stronger mode
// releases it. A retire with such a wipe retires, recording it.
func TestUnverifiedWipe(t *testing.T) {
	h := newHarness(t)
	node := h.inState(store.NodeActive)
	h.machine.answers[proto.CommandDiskWipe] = func(in json.RawMessage) (json.RawMessage, error) {
		if string(in) == `{"mode":"quick"}` {
			return json.RawMessage(`{"attested":false,"reason":"disk sda failed its read-back"}`), nil
		}
		return json.RawMessage(`{"attested":true}`), nil
	}
	run, _, err := h.act(node, Release, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run, n := h.end(run.ID)
	if run.State != store.RunSucceeded || n.State != store.NodeFailed || n.FailedFrom != store.NodeReleasing ||
		n.Failure.Error.Code != proto.UnverifiedWipe || n.Failure.Step != "steps[1]" || n.Failure.RunID != run.ID {
		t.Fatalf("run %s, node %s from %s, failure %+v", run.State, n.State, n.FailedFrom, n.Failure)
	}
	if _, err := h.deploy(node, "testdata/deploy-only.json"); proto.CodeOf(err) != proto.InvalidState {
		t.Errorf("deploying a node with an unverified wipe: %v", err)
	}
	if run, _, err = h.act(node, Release, Options{Wipe: proto.WipeCryptoErase}); err != nil {
		t.Fatal(err)
	}
	if _, n = h.end(run.ID); n.State != store.NodeReady || n.Failure != nil {
		t.Fatalf("a release with a stronger mode: %s %+v", n.State, n.Failure)
	}

	h.machine.answers[proto.CommandDiskWipe] = func(json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"attested":false,"reason":"the signature does not verify"}`), nil
	}
	if run, _, err = h.act(node, Retire, Options{}); err != nil {
		t.Fatal(err)
	}
	if run, n = h.end(run.ID); n.State != store.NodeRetired || n.UnverifiedWipe == nil || n.UnverifiedWipe.Error.Code != proto.UnverifiedWipe || n.IdentityRevokedAt.IsZero() {
		t.Errorf("retire with an unverified wipe: %s, %+v", n.State, n.UnverifiedWipe)
	}
	if _, _, err := h.act(node, Release, Options{}); proto.AsError(err).Details.Reason != store.NodeRetired {
		t.Errorf("releasing a retired node: %v", err)
	}
	// A wipe mode goes with a release alone, and must be one of the modes.
	h2 := newHarness(t)
	active := h2.inState(store.NodeActive)
	for _, o := range []struct {
		req  Request
		wipe string
	}{{Release, "shred"}, {Retire, proto.WipeQuick}} {
		if _, _, err := h2.act(active, o.req, Options{Wipe: o.wipe}); proto.CodeOf(err) != proto.InvalidInput || proto.AsError(err).Details.Path != "wipe" {
			t.Errorf("%s --wipe %s: %v, want INVALID_INPUT at wipe", o.req, o.wipe, err)
		}
	}
}

// TestOutOfBandPool: on a pool with agent: none the -oob variants run, and rescue fails
// the node with UNSUPPORTED.
func TestOutOfBandPool(t *testing.T) {
	h := newHarness(t)
	node := h.inState(store.NodeActive)
	h.setPolicy(store.PoolPolicy{Agent: store.AgentNone})
	h.machine.forget()
	_, n, err := h.act(node, Rescue, Options{})
	if err != nil || n.State != store.NodeFailed || n.FailedFrom != store.NodeRescue || n.Failure.Error.Code != proto.Unsupported {
		t.Fatalf("rescue out of band: %v, node %s %+v", err, n.State, n.Failure)
	}
	var profiles []string
	for _, req := range []Request{Release, Inspect, Commission, Retire} {
		run, _, err := h.act(node, req, Options{})
		if err != nil {
			t.Fatalf("%s: %v", req, err)
		}
		run, n := h.end(run.ID)
		if n.State == store.NodeFailed {
			t.Fatalf("%s: %+v", req, n.Failure)
		}
		profiles = append(profiles, run.Profile.ID)
	}
	if diff := cmp.Diff([]string{"metal-release-oob", "metal-inspect-oob", "metal-commission-oob", "metal-retire-oob"}, profiles); diff != "" {
		t.Errorf("profiles (-want +got):\n%s", diff)
	}
	for _, r := range h.machine.got {
		if r.Role != profile.Site {
			t.Errorf("%s went to the %s of a machine without agent", r.Kind, r.Role)
		}
	}
}

// TestAnOutOfBandPoolOffersNoRescue: an active node of a pool with agent: none, whose
// machines boot no ramdisk, is not offered a rescue (nodes get's requests, the
// console's buttons), which the specification has fail the node UNSUPPORTED; nor is a
// node in rescue whose pool has since lost its agent offered unrescue, which would fail
// it alike. A rescue asked still fails the node UNSUPPORTED, as the specification says.
// Before, both were offered, and taking the offer only failed the node.
func TestAnOutOfBandPoolOffersNoRescue(t *testing.T) {
	inRescue := newHarness(t)
	rescue := inRescue.inState(store.NodeRescue)
	inRescue.setPolicy(store.PoolPolicy{Agent: store.AgentNone})
	if diff := cmp.Diff([]Request{Retire}, inRescue.offers(rescue)); diff != "" {
		t.Errorf("the node in rescue offers (-want +got):\n%s", diff)
	}
	h := newHarness(t)
	active := h.inState(store.NodeActive)
	h.setPolicy(store.PoolPolicy{Agent: store.AgentNone})
	if diff := cmp.Diff([]Request{Release, Retire, Remediate}, h.offers(active)); diff != "" {
		t.Errorf("the active node offers (-want +got):\n%s", diff)
	}
	_, n, err := h.act(active, Rescue, Options{})
	if err != nil || n.State != store.NodeFailed || n.FailedFrom != store.NodeRescue || n.Failure.Error.Code != proto.Unsupported {
		t.Fatalf("rescue asked out of band: %v, node %s %+v; want it failed UNSUPPORTED", err, n.State, n.Failure)
	}
}

// TestCancel: cancelling a workflow abandons the attempt it is on, skips the rest of
// its main steps, runs its cleanup and fails the node with reason cancelled; a retry
// runs the workflow again.
func TestCancel(t *testing.T) {
	h := newHarness(t)
	node := h.inState(store.NodeInspecting)
	// What an agent relay keeps of the attempt the cancel abandons: a command its agent
	// has not answered; and one of another run.
	inspecting := h.node(node).Workflow
	h.store.Update(func(tx *store.Tx) error {
		for _, id := range []string{inspecting + ":main.0:a1:wait", "wf_0000000000000000:main.0:a1"} {
			if _, err := tx.EnqueueAgentCommand(node, proto.RoleRamdisk, proto.Command{ID: id, Kind: "inventory.refresh"}, nil); err != nil {
				return err
			}
		}
		return nil
	})
	h.clock.BlockUntil(1)
	run, _, err := h.act(node, Cancel, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.act(node, Cancel, Options{}); proto.CodeOf(err) != proto.InvalidState {
		t.Errorf("a second cancel: %v", err)
	}
	run, n := h.end(run.ID)
	f := n.Failure
	if n.State != store.NodeFailed || n.FailedFrom != store.NodeInspecting || f == nil || f.Error.Details.Reason != "cancelled" || f.Step != "steps[0]" {
		t.Fatalf("node %s from %s, failure %+v", n.State, n.FailedFrom, f)
	}
	var states []string
	for _, s := range run.Steps {
		states = append(states, s.Path()+" "+s.State)
	}
	if diff := cmp.Diff([]string{"steps[0] failed", "steps[1] skipped", "cleanup[0] succeeded"}, states); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	if a := run.Steps[0].Attempts; len(a) != 1 || a[0].FinishedAt.IsZero() || a[0].Error.Details.Reason != "cancelled" {
		t.Errorf("the abandoned attempt %+v", a)
	}
	if got := h.machine.kinds(); !slices.Contains(got, "site boot.cleanUp") {
		t.Errorf("cleanup did not run: %v", got)
	}
	// The abandoned attempt's command is never delivered to an agent connecting later.
	var pending []string
	h.store.View(func(tx *store.Tx) error {
		cmds, err := tx.PendingAgentCommands(node)
		for _, c := range cmds {
			pending = append(pending, c.ID)
		}
		return err
	})
	if diff := cmp.Diff([]string{"wf_0000000000000000:main.0:a1"}, pending); diff != "" {
		t.Errorf("pending commands (-want +got):\n%s", diff)
	}
	h.machine.bootsNothing = false
	retry, _, err := h.act(node, Retry, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if retry, n = h.end(retry.ID); n.State != store.NodeReady || retry.Kind != string(Inspect) {
		t.Errorf("retry: %s of %s, node %s %+v", retry.State, retry.Kind, n.State, n.Failure)
	}
}

// TestCommissionWithoutGPU: commissioning skips the GPU diagnostics of a machine that
// reports no GPU, unless the pool requires GPUs; a machine that answers diag.dcgm with
// UNSUPPORTED no-gpu counts as skipped too.
func TestCommissionWithoutGPU(t *testing.T) {
	for name, tc := range map[string]struct {
		gpus     string
		require  bool
		answer   error
		state    string
		diagSent int
	}{
		"no GPU in the inventory":              {gpus: `null`, state: store.NodeReady},
		"the machine answers no-gpu":           {answer: proto.Errorf(proto.Unsupported, "no NVIDIA GPU").WithReason(proto.ReasonNoGPU), state: store.NodeReady, diagSent: 1},
		"a pool that requires GPUs":            {gpus: `[]`, require: true, answer: proto.Errorf(proto.Unsupported, "no NVIDIA GPU").WithReason(proto.ReasonNoGPU), state: store.NodeFailed, diagSent: 1},
		"a machine with GPUs runs diagnostics": {gpus: `[{"model":"H100"}]`, state: store.NodeReady, diagSent: 1},
		"another UNSUPPORTED is not a skip":    {answer: proto.Errorf(proto.Unsupported, "no DCGM"), state: store.NodeFailed, diagSent: 1},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			node := h.enroll(nil)
			h.store.Update(func(tx *store.Tx) error {
				if tc.gpus != "" {
					if _, err := tx.PutInventory(node, proto.SectionGPUs, json.RawMessage(tc.gpus)); err != nil {
						return err
					}
				}
				_, err := tx.SetPoolPolicy("acme", "gpu", store.PoolPolicy{HardwareProfile: "gpu-redfish", RequireGPUs: tc.require})
				return err
			})
			if tc.answer != nil {
				h.machine.answers[proto.CommandDiagDCGM] = func(json.RawMessage) (json.RawMessage, error) { return nil, tc.answer }
			}
			run, _, err := h.act(node, Commission, Options{})
			if err != nil {
				t.Fatal(err)
			}
			run, n := h.end(run.ID)
			if n.State != tc.state || len(h.machine.received(proto.CommandDiagDCGM)) != tc.diagSent {
				t.Errorf("node %s (%+v), %d diag.dcgm sent; want %s, %d", n.State, n.Failure, len(h.machine.received(proto.CommandDiagDCGM)), tc.state, tc.diagSent)
			}
			if tc.state == store.NodeReady && tc.diagSent == 0 && (run.Steps[1].State != store.StepSkipped || run.Steps[1].Reason == "") {
				t.Errorf("diag.dcgm %s %q", run.Steps[1].State, run.Steps[1].Reason)
			}
		})
	}
}

// TestRetryKeepsTheChain: on a pool that commissions its machines, an inspection of the
// enrollment's chain that failed, retried, goes on to commissioning before the node is
// ready.
func TestRetryKeepsTheChain(t *testing.T) {
	h := newHarness(t)
	h.setPolicy(store.PoolPolicy{HardwareProfile: "gpu-redfish", Enrollment: store.EnrollCommission})
	h.machine.answers["inventory.refresh"] = func(json.RawMessage) (json.RawMessage, error) {
		return nil, proto.Errorf(proto.DriverError, "the ramdisk lost its disk controller")
	}
	n, _ := h.startEnroll("52:54:00:00:00:01", nil)
	if n = h.settle(n.ID); n.State != store.NodeFailed || n.FailedFrom != store.NodeInspecting {
		t.Fatalf("node %s from %s", n.State, n.FailedFrom)
	}
	delete(h.machine.answers, "inventory.refresh")
	if _, _, err := h.act(n.ID, Retry, Options{}); err != nil {
		t.Fatal(err)
	}
	if n = h.settle(n.ID); n.State != store.NodeReady || n.Transition != string(Commission) {
		t.Errorf("after the retry: %s, last transition %s, %+v", n.State, n.Transition, n.Failure)
	}
}

// TestRetireWithoutRamdisk: a retire whose machine never boots its ramdisk does not wait
// for it beyond metal.ensureRamdisk's 20 minutes: the disk wipe fails at once with
// UNAVAILABLE (no-ramdisk) and sends nothing, the machine is powered off, the identity
// revoked and the node retired with the wipe recorded as unverified.
func TestRetireWithoutRamdisk(t *testing.T) {
	h := newHarness(t)
	node := h.enroll(nil)
	h.machine.bootsNothing = true
	h.machine.hang(proto.CommandDiskWipe)
	run, _, err := h.act(node, Retire, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); h.node(node).PoweredAt.IsZero(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the retire never power-cycled the machine")
		}
	}
	h.clock.BlockUntil(1)
	h.clock.Advance(20 * time.Minute)
	run, n := h.end(run.ID)
	if n.State != store.NodeRetired || n.IdentityRevokedAt.IsZero() {
		t.Fatalf("node %s, identity revoked at %v", n.State, n.IdentityRevokedAt)
	}
	wipe := run.Steps[1]
	if e := wipe.Error; wipe.State != store.StepFailed || e == nil || e.Code != proto.Unavailable || e.Details.Reason != "no-ramdisk" {
		t.Errorf("disk.wipe %s: %+v", wipe.State, wipe.Error)
	}
	if got := h.machine.received(proto.CommandDiskWipe); len(got) != 0 {
		t.Errorf("disk.wipe was sent to an absent ramdisk: %+v", got)
	}
	if got := h.machine.received("power.setPower"); len(got) != 2 || got[1].Input != `{"action":"off"}` {
		t.Errorf("power commands %+v, want the cycle then off", got)
	}
	if n.UnverifiedWipe == nil || n.UnverifiedWipe.Error.Code != proto.UnverifiedWipe {
		t.Errorf("the retired node's unverified wipe %+v", n.UnverifiedWipe)
	}
}

// sortedRequests is rs in Requests' order.
func sortedRequests(rs []Request) []Request {
	return slices.SortedFunc(slices.Values(rs), func(a, b Request) int {
		return slices.Index(Requests(), a) - slices.Index(Requests(), b)
	})
}

// Requests are the requests an operator makes of an enrolled node.
func Requests() []Request {
	return []Request{Inspect, Commission, Deploy, Release, Retire, Rescue, Unrescue, Remediate, Retry, Cancel}
}

// TestOutOfBandReleaseTakesNoWipeMode: a release on a pool with agent: none runs
// metal-release-oob@1, which boots no ramdisk and wipes no disk. A release asking for a
// wipe (`nodes release ID --wipe secure-erase`) is refused UNSUPPORTED at wipe and changes
// nothing, rather than making the node ready with its disks as its user left them; one
// asking for none, which is what it does, or for no mode, releases it.
func TestOutOfBandReleaseTakesNoWipeMode(t *testing.T) {
	h := newHarness(t)
	node := h.inState(store.NodeActive)
	h.setPolicy(store.PoolPolicy{Agent: store.AgentNone})
	h.machine.forget()
	before := h.node(node)
	for _, mode := range []string{proto.WipeQuick, proto.WipeSecureErase, proto.WipeCryptoErase} {
		run, _, err := h.act(node, Release, Options{Wipe: mode})
		if proto.CodeOf(err) != proto.Unsupported || proto.AsError(err).Details.Path != "wipe" {
			t.Errorf("release --wipe %s out of band: %v (workflow %q), want UNSUPPORTED at wipe", mode, err, run.ID)
		}
		if after := h.node(node); after.Rev != before.Rev || after.State != store.NodeActive {
			t.Fatalf("the refused release --wipe %s left node %s rev %d (was rev %d)", mode, after.State, after.Rev, before.Rev)
		}
	}
	run, _, err := h.act(node, Release, Options{Wipe: proto.WipeNone})
	if err != nil {
		t.Fatal(err)
	}
	if run, n := h.end(run.ID); n.State != store.NodeReady || run.Profile.ID != "metal-release-oob" {
		t.Errorf("release --wipe none out of band: %s of %s, node %s %+v", run.State, run.Profile.ID, n.State, n.Failure)
	}
}

// TestAFailureWithoutWorkflowOffersNoRetry: a rescue on a pool with agent: none fails the
// node at once, in no workflow, so a retry has nothing to run and is INVALID_STATE. What
// the node offers (nodes get's requests, the console's buttons) is what it takes:
// release and retire, not retry.
func TestAFailureWithoutWorkflowOffersNoRetry(t *testing.T) {
	h := newHarness(t)
	node := h.inState(store.NodeActive)
	h.setPolicy(store.PoolPolicy{Agent: store.AgentNone})
	if _, n, err := h.act(node, Rescue, Options{}); err != nil || n.State != store.NodeFailed {
		t.Fatalf("rescue out of band: %v, node %s", err, n.State)
	}
	var offers []Request
	if err := h.store.View(func(tx *store.Tx) (err error) { offers, err = Offers(tx, h.node(node)); return err }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.act(node, Retry, Options{}); proto.CodeOf(err) != proto.InvalidState {
		t.Fatalf("retry of a failure in no workflow: %v, want INVALID_STATE", err)
	}
	if diff := cmp.Diff([]Request{Release, Retire}, offers); diff != "" {
		t.Errorf("the node offers (-want +got):\n%s", diff)
	}
}

// TestDCGMOnFewerGPUsThanInventoried: a diag.dcgm run that registry/attest passed on
// the GPUs its agent found on PCI fails when the node's inventory lists more (a GPU gone
// from the bus since its agent reported them); one on every inventoried GPU passes.
// Before, the run on 7 GPUs of a machine inventoried with 8 commissioned it.
func TestDCGMOnFewerGPUsThanInventoried(t *testing.T) {
	// passedOn is what registry/attest stores for a level 2 run that passed on n GPUs.
	passedOn := func(n int) json.RawMessage {
		r := proto.DCGMResult{Level: 2, GPUs: n, Passed: true}
		for _, test := range []string{"software", "memory"} {
			dt := proto.DCGMTest{Name: test, Status: proto.DCGMPass}
			for id := range n {
				dt.Results = append(dt.Results, proto.DCGMEntityResult{Entity: "GPU", ID: id, Status: proto.DCGMPass})
			}
			r.Tests = append(r.Tests, dt)
		}
		out, _ := json.Marshal(r)
		return out
	}
	var inventory []proto.GPUInfo
	for i := range 8 {
		inventory = append(inventory, proto.GPUInfo{PCIAddress: fmt.Sprintf("0000:%02x:00.0", 0x18+i), Vendor: "10de", Device: "2330"})
	}
	for _, tc := range []struct {
		ran   int
		state string
	}{{7, store.NodeFailed}, {8, store.NodeReady}} {
		h := newHarness(t)
		node := h.enroll(nil)
		err := h.store.Update(func(tx *store.Tx) error {
			if _, err := tx.PutInventory(node, proto.SectionGPUs, mustJSON(inventory)); err != nil {
				return err
			}
			_, err := tx.SetPoolPolicy("acme", "gpu", store.PoolPolicy{HardwareProfile: "gpu-redfish", RequireGPUs: true})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		h.machine.answers[proto.CommandDiagDCGM] = func(json.RawMessage) (json.RawMessage, error) { return passedOn(tc.ran), nil }
		run, _, err := h.act(node, Commission, Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, n := h.end(run.ID)
		if n.State != tc.state {
			t.Errorf("a run on %d of 8 inventoried GPUs: node %s (%+v); want %s", tc.ran, n.State, n.Failure, tc.state)
			continue
		}
		if tc.state == store.NodeFailed && (n.Failure.Error.Code != proto.DriverError || n.Failure.Error.Details.Reason != proto.ReasonTestsFailed ||
			!strings.Contains(n.Failure.Error.Message, "the run was on the 7 NVIDIA GPU(s) the machine has on PCI, and its inventory lists 8")) {
			t.Errorf("a run on 7 of 8 GPUs failed with %+v; want DRIVER_ERROR tests-failed naming 7 and 8", n.Failure.Error)
		}
	}
}

// TestACancelledRescueLeavesNoRamdiskToken: a rescue cancelled once
// metal.ensureRamdisk prepared the ramdisk's boot and power-cycled the machine (its
// ramdisk never joins) leaves no unused join token: the token, which the boot script
// carries in the clear, would admit a ramdisk of the node, failed, for the rest of its
// hour. (The boot entry stays, as the specification's metal-rescue@1 has no cleanup:
// unrescue, release and retire drop it.)
func TestACancelledRescueLeavesNoRamdiskToken(t *testing.T) {
	h := newHarness(t)
	node := h.inState(store.NodeActive)
	h.svc.cfg.Ramdisk = mintingRamdisk{}
	h.machine.forget()
	h.machine.bootsNothing = true
	rescue, _, err := h.act(node, Rescue, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); h.node(node).PoweredAt.IsZero(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the rescue never power-cycled the machine")
		}
	}
	if unused := h.unusedTokens(node); unused != 1 {
		t.Fatalf("the rescue's ramdisk boot left %d unused join tokens, want its own", unused)
	}
	if _, _, err := h.act(node, Cancel, Options{}); err != nil {
		t.Fatal(err)
	}
	rescue, n := h.end(rescue.ID)
	if n.State != store.NodeFailed || n.FailedFrom != store.NodeRescue || n.Failure.Error.Details.Reason != proto.ReasonCancelled {
		t.Fatalf("node %s from %s, failure %+v", n.State, n.FailedFrom, n.Failure)
	}
	if unused := h.unusedTokens(node); unused != 0 {
		t.Errorf("the cancelled rescue left %d unused join tokens", unused)
	}
}

// releasedPastAHiddenNamespace releases an active node whose wipe, every disk wiped,
// is not attested for a detached NVMe namespace (as registry/attest stores it), and
// returns the node, the release and the node as it failed UNVERIFIED_WIPE.
func (h *harness) releasedPastAHiddenNamespace() (string, store.Run, store.Node) {
	h.t.Helper()
	node := h.inState(store.NodeActive)
	h.machine.answers[proto.CommandDiskWipe] = func(json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"attested":false,"reason":"disk nvme0n1 has capacity the wipe could not reach: nvme-namespace-detached 2 (67108864 bytes)",` +
			`"disks":[{"name":"nvme0n1","sizeBytes":1073741824,"wiped":true,"hidden":[{"kind":"nvme-namespace-detached","nsid":2,"bytes":67108864}]}]}`), nil
	}
	run, _, err := h.act(node, Release, Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	_, n := h.end(run.ID)
	if n.State != store.NodeFailed || n.Failure == nil || n.Failure.Error.Code != proto.UnverifiedWipe {
		h.t.Fatalf("node %s, failure %+v; want failed UNVERIFIED_WIPE", n.State, n.Failure)
	}
	return node, run, n
}

// TestAWipeOfHiddenCapacityAdvisesNoStrongerMode: a release whose wipe a disk hid
// capacity from fails the node saying what frees it (the namespace attached or deleted,
// the native max restored) and not to release in a stronger mode, which no mode reaches.
// Before, its failure told the operator to release again with secure-erase, which fails
// the same way.
func TestAWipeOfHiddenCapacityAdvisesNoStrongerMode(t *testing.T) {
	h := newHarness(t)
	_, _, n := h.releasedPastAHiddenNamespace()
	if msg := n.Failure.Error.Message; strings.Contains(msg, "stronger mode") || !strings.Contains(msg, "attach or delete the hidden NVMe namespace") {
		t.Errorf("the failure says %q; want what frees the hidden capacity, not a stronger mode", msg)
	}
}

// TestARescueFromFailedMendsWhatAReleaseCouldNotWipe: a node failed UNVERIFIED_WIPE
// after a release whose wipe a detached NVMe namespace kept from being attested is
// rescued from failed: the rescue boots its ramdisk through the workflow engine and
// leaves the node failed, its failure kept, taking what failed takes (retry, release,
// retire, rescue) and not unrescue, which would make active a node its release took the
// installation of. Once the namespace is mended on that ramdisk, a release makes it
// ready. Before, a failed node could not be rescued (INVALID_STATE): mending the disk
// took work outside the product, or a retire.
func TestARescueFromFailedMendsWhatAReleaseCouldNotWipe(t *testing.T) {
	h := newHarness(t)
	node, release, failed := h.releasedPastAHiddenNamespace()
	if msg := failed.Failure.Error.Message; !strings.Contains(msg, "`nodes rescue ID`, from failed too") {
		t.Errorf("the failure says %q; want the rescue that boots the node's ramdisk to mend it", msg)
	}
	rescue, during, err := h.act(node, Rescue, Options{})
	if err != nil {
		t.Fatalf("rescue of the failed node: %v", err)
	}
	if during.State != store.NodeRescue || during.FailedFrom != store.NodeReleasing || during.Failure == nil || during.Failure.RunID != release.ID {
		t.Errorf("while the rescue runs the node is %s, failed from %q (%+v); want rescue, its failure kept", during.State, during.FailedFrom, during.Failure)
	}
	rescue, n := h.end(rescue.ID)
	if rescue.State != store.RunSucceeded || rescue.Profile.ID != "metal-rescue" {
		t.Fatalf("the rescue %s of %s", rescue.State, rescue.Profile.ID)
	}
	if n.State != store.NodeFailed || n.FailedFrom != store.NodeReleasing || n.Failure == nil || n.Failure.RunID != release.ID || n.Failure.Error.Code != proto.UnverifiedWipe {
		t.Fatalf("after the rescue the node is %s from %q (%+v); want failed from releasing, the release's failure kept", n.State, n.FailedFrom, n.Failure)
	}
	var offers []Request
	if err := h.store.View(func(tx *store.Tx) (err error) { offers, err = Offers(tx, n); return err }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Request{Retry, Release, Retire, Rescue}, offers); diff != "" {
		t.Errorf("the rescued failed node offers (-want +got):\n%s", diff)
	}
	if _, _, err := h.act(node, Unrescue, Options{}); proto.CodeOf(err) != proto.InvalidState || proto.AsError(err).Details.Reason != store.NodeFailed {
		t.Errorf("unrescue of the rescued failed node: %v, want INVALID_STATE, reason failed", err)
	}
	// The namespace attached on the ramdisk: the next release's wipe is attested.
	delete(h.machine.answers, proto.CommandDiskWipe)
	again, _, err := h.act(node, Release, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if run, n := h.end(again.ID); run.State != store.RunSucceeded || n.State != store.NodeReady || n.Failure != nil || n.FailedFrom != "" {
		t.Errorf("the release after the rescue: %s, node %s from %q (%+v); want ready", run.State, n.State, n.FailedFrom, n.Failure)
	}
}

// TestARescueFromFailedThatFailsKeepsTheFailure: a rescue from failed that fails (the
// machine's BMC refuses the power cycle) or is cancelled (its ramdisk never joins)
// leaves the node failed with the failure it had, from the state it failed from: the
// release's UNVERIFIED_WIPE, whose workflow a retry runs again. The rescue's own
// failure is the node.state event of its move back to failed, and its workflow.ended.
// Before, the node failed from rescue with the rescue's failure, and its retry ran the
// rescue rather than the release.
func TestARescueFromFailedThatFailsKeepsTheFailure(t *testing.T) {
	for name, stop := range map[string]func(h *harness, node string){
		"failed": func(h *harness, _ string) {
			h.machine.answers[proto.CommandSetPower] = func(json.RawMessage) (json.RawMessage, error) {
				return nil, proto.Errorf(proto.DriverError, "the BMC refuses the power cycle")
			}
		},
		"cancelled": func(h *harness, node string) {
			h.machine.bootsNothing = true
			h.relayedYet("site", proto.CommandSetPower)
			if _, _, err := h.act(node, Cancel, Options{}); err != nil {
				h.t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			node, release, failed := h.releasedPastAHiddenNamespace()
			// The release powered the machine off: its ramdisk's session ended, and the
			// rescue boots it again.
			h.left(node)
			h.clock.Advance(workflow.ReconnectGrace + time.Second)
			h.machine.forget()
			rescue, _, err := h.act(node, Rescue, Options{})
			if err != nil {
				t.Fatal(err)
			}
			stop(h, node)
			rescue, n := h.end(rescue.ID)
			if rescue.State == store.RunSucceeded || rescue.Failure == nil {
				t.Fatalf("the rescue %s, failure %+v; want it stopped", rescue.State, rescue.Failure)
			}
			if n.State != store.NodeFailed || n.FailedFrom != store.NodeReleasing || !reflect.DeepEqual(n.Failure, failed.Failure) {
				t.Fatalf("after the rescue %s the node is %s from %q (%+v); want failed from releasing, the release's failure kept (%+v)",
					rescue.State, n.State, n.FailedFrom, n.Failure, failed.Failure)
			}
			moved := h.lastEvent(node, store.EventNodeState)
			if moved.From != store.NodeRescue || moved.To != store.NodeFailed || moved.Workflow != rescue.ID || moved.Step != rescue.Failure.Step ||
				!reflect.DeepEqual(moved.Error, rescue.Failure.Error) {
				t.Errorf("the node's move back to failed is recorded as %+v; want from rescue, with the rescue's failure %+v", moved, rescue.Failure)
			}
			if ended := h.lastEvent(node, store.EventWorkflowEnded); ended.Workflow != rescue.ID || !reflect.DeepEqual(ended.Error, rescue.Failure.Error) {
				t.Errorf("the rescue's end is recorded as %+v; want its failure %+v", ended, rescue.Failure)
			}
			// The retry runs the release again, whose wipe is attested once the namespace
			// is mended.
			delete(h.machine.answers, proto.CommandDiskWipe)
			delete(h.machine.answers, proto.CommandSetPower)
			h.machine.bootsNothing = false
			retry, _, err := h.act(node, Retry, Options{})
			if err != nil {
				t.Fatalf("retry after the rescue: %v", err)
			}
			if retry.Kind != string(Release) || retry.ID == release.ID {
				t.Errorf("the retry runs %s; want the release again", retry.Kind)
			}
			if run, n := h.end(retry.ID); run.State != store.RunSucceeded || n.State != store.NodeReady {
				t.Errorf("the retried release: %s, node %s (%+v); want ready", run.State, n.State, n.Failure)
			}
		})
	}
}
