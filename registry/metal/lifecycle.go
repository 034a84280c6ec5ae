package metal

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/attest"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// Request is what an operator (or enrollment) asks of a node.
type Request string

// The requests. Each but cancel and retry starts a workflow, whose kind it is.
const (
	Enroll     Request = "enroll"
	Inspect    Request = "inspect"
	Commission Request = "commission"
	Deploy     Request = "deploy"
	Release    Request = "release"
	Retire     Request = "retire"
	Rescue     Request = "rescue"
	Unrescue   Request = "unrescue"
	// Remediate runs a remediation profile on an active node (Service.Remediate).
	Remediate Request = "remediate"
	// Retry runs again, from failed, the workflow the node failed in.
	Retry Request = "retry"
	// Cancel stops the running workflow: the node fails with reason cancelled.
	Cancel Request = "cancel"
)

// The lifecycle table: the only place that says which request a node in which state
// may make, and where it goes. docs/nodes.md draws it.
var (
	// allowed lists the requests each state takes. A request while the node's workflow
	// runs is refused, cancel aside.
	allowed = map[string][]Request{
		store.NodeEnrolling:     {Cancel},
		store.NodeInspecting:    {Cancel},
		store.NodeCommissioning: {Cancel},
		store.NodeReady:         {Inspect, Commission, Deploy, Retire},
		store.NodeDeploying:     {Cancel},
		store.NodeActive:        {Release, Retire, Rescue, Remediate},
		store.NodeRemediating:   {Cancel},
		store.NodeReleasing:     {Cancel},
		store.NodeRetiring:      {Cancel},
		store.NodeRetired:       nil,
		store.NodeRescue:        {Unrescue, Retire, Cancel},
		store.NodeFailed:        {Retry, Release, Retire, Rescue},
	}
	// transitions are what each workflow-starting request runs: the state the node is in
	// while it runs, the state its success leaves the node in (but a rescue from failed,
	// which leaves it failed: rescuedFromFailed), and the shipped profile (its
	// out-of-band variant on a pool with agent: none; "" is UNSUPPORTED there).
	transitions = map[Request]struct {
		during, succeeded string
		profile, oob      string
	}{
		Enroll:     {store.NodeEnrolling, store.NodeReady, "metal-enroll@1", "metal-enroll@1"},
		Inspect:    {store.NodeInspecting, store.NodeReady, "metal-inspect@2", "metal-inspect-oob@1"},
		Commission: {store.NodeCommissioning, store.NodeReady, "metal-commission@1", "metal-commission-oob@1"},
		Deploy:     {store.NodeDeploying, store.NodeActive, "", ""},
		Release:    {store.NodeReleasing, store.NodeReady, "metal-release@1", "metal-release-oob@1"},
		Retire:     {store.NodeRetiring, store.NodeRetired, "metal-retire@1", "metal-retire-oob@1"},
		Rescue:     {store.NodeRescue, store.NodeRescue, "metal-rescue@1", ""},
		Unrescue:   {store.NodeRescue, store.NodeActive, "metal-unrescue@1", ""},
		Remediate:  {store.NodeRemediating, store.NodeActive, "", ""},
	}
	// chains are the requests enrollment runs one after the other, by the pool's
	// policy.enrollment, before the node is ready.
	chains = map[string][]Request{
		"":                     nil,
		store.EnrollTrust:      nil,
		store.EnrollInspect:    {Inspect},
		store.EnrollCommission: {Inspect, Commission},
	}
)

// States are the node states, in the order docs/nodes.md lists them.
func States() []string {
	return []string{store.NodeEnrolling, store.NodeInspecting, store.NodeCommissioning, store.NodeReady, store.NodeDeploying,
		store.NodeActive, store.NodeRemediating, store.NodeReleasing, store.NodeRetiring, store.NodeRetired, store.NodeRescue, store.NodeFailed}
}

// Options are what a request takes beside the node.
type Options struct {
	// Profile is the profile a deploy or a remediation runs.
	Profile *store.ProfileRecord
	// Wipe is the mode a release's disk.wipe runs with; "" keeps the profile's.
	Wipe string
}

// Act makes a request of one of tenant's nodes in tx, as the lifecycle table allows: it
// creates the request's workflow and moves the node to the state it runs in (cancel
// marks the running workflow cancelled instead). Start the returned run once tx has
// committed, and Abort a cancelled one. A request the table does not allow, or any but
// cancel while a workflow runs, is INVALID_STATE with details.reason the node's state,
// and changes nothing; another tenant's node is NOT_FOUND.
func (s *Service) Act(tx *store.Tx, tenant, nodeID string, req Request, o Options) (store.Run, store.Node, error) {
	node, err := tx.Node(nodeID)
	if err != nil || node.Tenant != tenant {
		return store.Run{}, node, proto.Errorf(proto.NotFound, "node %q not found: `nodes list` shows the tenant's nodes", nodeID).WithPath(nodeField)
	}
	running, err := workflowRunning(tx, node)
	if err != nil {
		return store.Run{}, node, err
	}
	if !slices.Contains(takes(node.State, running), req) {
		return store.Run{}, node, refusal(node, req, running)
	}
	if err := barred(tx, node, req); err != nil {
		return store.Run{}, node, err
	}
	if o.Wipe != "" && !slices.Contains(proto.WipeModes, o.Wipe) {
		return store.Run{}, node, proto.Errorf(proto.InvalidInput, "wipe mode %q: use one of %s", o.Wipe, strings.Join(proto.WipeModes, ", ")).WithPath("wipe")
	}
	if o.Wipe != "" && req != Release {
		return store.Run{}, node, proto.Errorf(proto.InvalidInput, "a wipe mode goes with a release").WithPath("wipe")
	}
	switch req {
	case Cancel:
		run, err := s.cfg.Engine.Cancel(tx, node.Workflow)
		return run, node, err
	case Retry:
		return s.retry(tx, node)
	}
	return s.begin(tx, node, req, o, "")
}

// takes lists the requests a node in state takes, as the lifecycle table says: only
// cancel while its workflow runs, the others of its state only while none does.
func takes(state string, running bool) []Request {
	var out []Request
	for _, r := range allowed[state] {
		if running == (r == Cancel) {
			out = append(out, r)
		}
	}
	return out
}

// Offers lists the requests node takes now (Act refuses every other with
// INVALID_STATE), in the lifecycle table's order: what a console or a CLI offers to do
// next. Of those its state takes, those barred now are left out (a node failed in no
// workflow has nothing to retry, for one), and so are those that would only fail it
// UNSUPPORTED (unsupported: a rescue on a pool with agent: none). Whether a credential
// may make one is the API's to say.
func Offers(tx *store.Tx, node store.Node) ([]Request, error) {
	running, err := workflowRunning(tx, node)
	if err != nil {
		return nil, err
	}
	var offers []Request
	for _, r := range takes(node.State, running) {
		switch err := barred(tx, node, r); {
		case err == nil:
			fails, err := unsupported(tx, node, r)
			if err != nil {
				return nil, err
			}
			if !fails {
				offers = append(offers, r)
			}
		case proto.CodeOf(err) != proto.InvalidState && (r != Retry || proto.CodeOf(err) != proto.NotFound):
			return nil, err
		}
	}
	return offers, nil
}

// unsupported says whether req would fail node UNSUPPORTED at once rather than run
// (begin): its pool has agent: none and req no out-of-band profile (withoutAgent).
func unsupported(tx *store.Tx, node store.Node, req Request) (bool, error) {
	if tr, ok := transitions[req]; !ok || tr.profile == "" || tr.oob != "" {
		return false, nil
	}
	pool, err := tx.Pool(node.Tenant, node.Pool)
	return err == nil && withoutAgent(pool, req), err
}

// withoutAgent says whether req, a request that runs a shipped lifecycle profile, has
// none on pool: its machines boot no ramdisk (agent: none) and the profile has no
// out-of-band variant (rescue, unrescue). The specification has such a rescue fail the
// node UNSUPPORTED, so Act does (begin), and Offers does not offer it.
func withoutAgent(pool store.Pool, req Request) bool {
	return pool.Policy.Agent == store.AgentNone && transitions[req].oob == ""
}

// barred is the INVALID_STATE of a request node's state takes but the node does not
// now, nil when it does:
//   - a node whose identity a retire revoked (metal.revokeIdentity ran, then the retire
//     failed in its cleanup, or was cancelled there) takes only what retires it, the
//     retire again or its retry: no ramdisk or installed OS of it joins again, so a
//     release could not wipe it, and out of band would make a retired machine ready;
//   - a retry, what checkRetry and checkUsable refuse (the latter NOT_FOUND);
//   - a deploy, or a retry of one, what checkWiped refuses;
//   - a rescue from failed on a pool with agent: none, whose machines boot no ramdisk:
//     from active it fails the node UNSUPPORTED, as the specification says, but a failed
//     node would only lose the failure it has, and with it what its retry runs.
func barred(tx *store.Tx, node store.Node, req Request) error {
	switch {
	case !node.IdentityRevokedAt.IsZero() && req != Retire && req != Cancel && (req != Retry || node.Transition != string(Retire)):
		return proto.Errorf(proto.InvalidState, "node %s cannot %s: its identity was revoked at %s (metal.revokeIdentity) and no agent of it joins again; retire it (`nodes retire %s`)",
			node.ID, req, node.IdentityRevokedAt.UTC().Format(time.RFC3339), node.ID).WithPath(nodeField).WithReason(node.State)
	case req == Retry:
		failed, err := checkRetry(tx, node)
		if err == nil {
			err = checkUsable(tx, node.Tenant, failed.Profile)
		}
		if err == nil && failed.Kind == string(Deploy) {
			err = checkWiped(tx, node)
		}
		return err
	case req == Deploy:
		return checkWiped(tx, node)
	case req == Rescue && node.State == store.NodeFailed:
		pool, err := tx.Pool(node.Tenant, node.Pool)
		if err != nil || pool.Policy.Agent != store.AgentNone {
			return err
		}
		return proto.Errorf(proto.InvalidState, "node %s cannot rescue: pool %s runs no agent (agent: none), so its machines boot no ramdisk; release or retire it", node.ID, pool.Name).WithPath(nodeField).WithReason(node.State)
	}
	return nil
}

// nodeField is the field of a request that names its node: the path of every refusal
// of a request for the node's state (INVALID_STATE), as of a node not found.
const nodeField = "nodeId"

// refusal is the INVALID_STATE of a request the node's state does not allow.
func refusal(node store.Node, req Request, running bool) error {
	var why string
	switch {
	case running && req != Cancel:
		why = fmt.Sprintf("its workflow %s runs: wait for it to end, or cancel it (`nodes cancel %s`)", node.Workflow, node.ID)
	case req == Cancel:
		why = "no workflow of it runs"
	case node.State == store.NodeRetired:
		why = "a retired node takes no request; it can only be read"
	default:
		var ok []string
		for _, r := range allowed[node.State] {
			ok = append(ok, string(r))
		}
		why = "it takes " + strings.Join(ok, ", ")
		if req == Deploy && node.State == store.NodeActive {
			why += ": release it first (`nodes release " + node.ID + "`), then deploy"
		}
	}
	return proto.Errorf(proto.InvalidState, "node %s is %s and cannot %s: %s", node.ID, node.State, req, why).WithPath(nodeField).WithReason(node.State)
}

// workflowRunning reports whether the node's last workflow still runs.
func workflowRunning(tx *store.Tx, node store.Node) (bool, error) {
	if node.Workflow == "" {
		return false, nil
	}
	run, err := tx.Run(node.Workflow)
	if proto.CodeOf(err) == proto.NotFound {
		return false, nil
	}
	return err == nil && run.State == store.RunRunning, err
}

// begin creates the workflow of req for node and moves the node to the state it runs in;
// next is the request that follows it on success. On a pool without agent a request
// with no out-of-band variant (rescue) fails the node with UNSUPPORTED and creates no run,
// and a release asking for a wipe mode other than none is UNSUPPORTED at wipe.
func (s *Service) begin(tx *store.Tx, node store.Node, req Request, o Options, next Request) (store.Run, store.Node, error) {
	tr := transitions[req]
	pool, err := tx.Pool(node.Tenant, node.Pool)
	if err != nil {
		return store.Run{}, node, err
	}
	var rec store.ProfileRecord
	switch {
	case req == Deploy || req == Remediate:
		rec = *o.Profile
	case withoutAgent(pool, req):
		f := &store.StepFailure{Error: proto.Errorf(proto.Unsupported, "pool %s runs no agent (agent: none): its machines cannot boot the ramdisk to %s", pool.Name, req)}
		node, err = updateNode(tx, node.ID, func(n *store.Node) error {
			n.State, n.FailedFrom, n.Failure, n.Transition, n.Next = store.NodeFailed, tr.during, f, string(req), ""
			return nil
		})
		return store.Run{}, node, err
	case pool.Policy.Agent == store.AgentNone && o.Wipe != "" && o.Wipe != proto.WipeNone:
		// The out-of-band release boots no ramdisk and wipes no disk: a mode taken would
		// make the node ready with the disks its user left, as if they were wiped.
		return store.Run{}, node, proto.Errorf(proto.Unsupported, "pool %s runs no agent (agent: none): its release boots no ramdisk and wipes no disk, so it takes no wipe mode (%s): wipe the disks by other means, then release the node without one",
			pool.Name, o.Wipe).WithPath("wipe")
	case pool.Policy.Agent == store.AgentNone:
		rec = shippedRecord(tr.oob)
	default:
		rec = shippedRecord(tr.profile)
	}
	p, err := profile.DefineStored(rec.ID, rec.Version, rec.Document)
	if err != nil {
		return store.Run{}, node, err
	}
	if o.Wipe != "" {
		if p, err = withWipeMode(p, o.Wipe); err != nil {
			return store.Run{}, node, err
		}
	}
	return s.create(tx, node, req, rec, p, next)
}

// create stores the run of p for node, started by req, and moves the node to the state
// req runs in; a request that takes the machine away from its installed OS (reinstalls)
// moves its identity epoch and deletes the node's unused join tokens. The run records the
// epoch it runs at: the node's, or the one a reinstall moved it to. Every run of a
// profile starts here (a deploy, a retry, the lifecycle's), so here another tenant's
// profile that names a secret reference is refused (checkSecretRefs).
func (s *Service) create(tx *store.Tx, node store.Node, req Request, rec store.ProfileRecord, p *profile.Profile, next Request) (store.Run, store.Node, error) {
	if err := checkSecretRefs(tx, node, rec.Tenant, p); err != nil {
		return store.Run{}, node, err
	}
	reinstall := slices.Contains(reinstalls, req)
	at, err := tx.Node(node.ID)
	if err != nil {
		return store.Run{}, node, err
	}
	if reinstall {
		at.NewIdentityEpoch(tx.Now())
	}
	end, err := endBytes(tx, node, req, p)
	if err != nil {
		return store.Run{}, node, err
	}
	run, err := s.cfg.Engine.Create(tx, workflow.NewRun{Kind: string(req), Node: node.ID, Tenant: node.Tenant,
		Profile: store.ProfileRef{Tenant: rec.Tenant, ID: rec.ID, Version: rec.Version}, Define: p, IdentityEpoch: at.IdentityEpoch, EndBytes: end})
	if err != nil {
		return run, node, err
	}
	node, err = updateNode(tx, node.ID, func(n *store.Node) error {
		n.State, n.Workflow, n.Transition, n.Next = transitions[req].during, run.ID, string(req), string(next)
		if !rescuedFromFailed(req, node) {
			n.FailedFrom, n.Failure = "", nil
		}
		if reinstall {
			n.NewIdentityEpoch(tx.Now())
		}
		return nil
	})
	if err == nil && reinstall {
		// A token minted before the epoch moved (the installation's user data, a ramdisk
		// boot of it) would join its holder at the new epoch.
		_, err = tx.DeleteUnusedJoinTokens(node.ID)
	}
	return run, node, err
}

// rescuedFromFailed says whether req, made of node (as it is when req is made, or as it
// is when req's run ends), is a rescue from failed. Such a rescue boots the machine's
// ramdisk for an operator to mend there what failed the node (a disk hiding capacity
// from a wipe) and keeps the node's FailedFrom and Failure while it runs; its end leaves
// the node failed again with them, its ramdisk running when it succeeded (when it failed
// or was cancelled, its own failure is the node.state event's). The failure stands until what the
// node failed in succeeds (a release: its wipe attested), so the node takes what failed
// takes (retry, release, retire, rescue) and never unrescue, which would make active a
// node whose installation a release took away or a deploy never finished.
func rescuedFromFailed(req Request, node store.Node) bool {
	return req == Rescue && (node.State == store.NodeFailed || node.State == store.NodeRescue && node.Failure != nil)
}

// retry runs again, from failed, the workflow the node failed in: the same request with
// the same profile document (a release keeps its wipe mode), followed by what the pool's
// enrollment chains after it.
func (s *Service) retry(tx *store.Tx, node store.Node) (store.Run, store.Node, error) {
	failed, err := checkRetry(tx, node)
	if err != nil {
		return store.Run{}, node, err
	}
	doc, err := tx.RunDocument(failed)
	if err != nil {
		return store.Run{}, node, err
	}
	p, err := profile.Define(doc)
	if err != nil {
		return store.Run{}, node, proto.Errorf(proto.InvalidState, "workflow %s's profile no longer passes the checks (%v)", failed.ID, err)
	}
	rec := store.ProfileRecord{Tenant: failed.Profile.Tenant, ID: failed.Profile.ID, Version: failed.Profile.Version, Document: doc}
	req := Request(failed.Kind)
	return s.create(tx, node, req, rec, p, chainAfter(tx, node, req))
}

// checkRetry is the workflow failed node failed in, which a retry runs again, or the
// INVALID_STATE of a retry: the node failed in no workflow (a rescue on a pool with
// agent: none), or the workflow ran the lifecycle profile of the agent its pool had
// then, which the pool no longer has. Its frozen document is the other's: an
// out-of-band release (metal-release-oob@1, which wipes no disk) run again on a pool
// whose machines run the agent would make the node ready with the disks its user left,
// and metal-release@1 on a pool with agent: none could only fail at
// metal.ensureRamdisk. A release or retire runs the pool's profile.
func checkRetry(tx *store.Tx, node store.Node) (store.Run, error) {
	if node.Failure == nil || node.Failure.RunID == "" {
		return store.Run{}, proto.Errorf(proto.InvalidState, "node %s failed in no workflow (%s): release or retire it", node.ID, node.Transition).WithPath(nodeField).WithReason(node.State)
	}
	failed, err := tx.Run(node.Failure.RunID)
	if err != nil {
		return failed, err
	}
	tr := transitions[Request(failed.Kind)]
	ran := fmt.Sprintf("%s@%d", failed.Profile.ID, failed.Profile.Version)
	if failed.Profile.Tenant != profile.ShippedTenant || ran != tr.profile && ran != tr.oob {
		return failed, nil
	}
	pool, err := tx.Pool(node.Tenant, node.Pool)
	if err != nil {
		return failed, err
	}
	agent, now := store.AgentBCD, tr.profile
	if pool.Policy.Agent == store.AgentNone {
		agent, now = store.AgentNone, tr.oob
	}
	if ran == now {
		return failed, nil
	}
	return failed, proto.Errorf(proto.InvalidState, "node %s failed in workflow %s, which ran %s; pool %s's agent is %s now, whose %s does not run it: release or retire the node (`nodes release %s`), which runs the pool's profile",
		node.ID, failed.ID, ran, pool.Name, agent, failed.Kind, node.ID).WithPath(nodeField).WithReason(node.State)
}

// checkWiped refuses to deploy a node whose last release wiped no disk
// (store.Node.UnwipedRelease: its pool had agent: none then) on a pool whose machines
// run the agent: there a node is ready only once the registry attested a wipe since its
// last user, and this one would hand the next user the disks the last one left. A
// commissioning wipes them. On a pool with agent: none the registry wipes no disk: its
// operator wipes them by other means.
func checkWiped(tx *store.Tx, node store.Node) error {
	if node.UnwipedRelease == "" {
		return nil
	}
	pool, err := tx.Pool(node.Tenant, node.Pool)
	if err != nil || pool.Policy.Agent == store.AgentNone {
		return err
	}
	return proto.Errorf(proto.InvalidState, "node %s's last release (workflow %s) wiped no disk, its pool running no agent then: its disks may hold what their last user left; commission it (`nodes commission %s`), which wipes them, then deploy",
		node.ID, node.UnwipedRelease, node.ID).WithPath(nodeField).WithReason(node.State)
}

// checkUsable refuses a stored profile version tenant may no longer start a workflow of:
// one deleted, or another tenant's made private, since a run of it began. A retry runs
// the failed run's version again as a new workflow, so it reaches only what metal.deploy
// would resolve for tenant; otherwise the owner's withdrawal would not stop another
// tenant's use. The answer is NOT_FOUND, alike for a private and a deleted version, as
// a deploy naming it is. A shipped profile is always usable.
func checkUsable(tx *store.Tx, tenant string, ref store.ProfileRef) error {
	if ref.Tenant == profile.ShippedTenant {
		return nil
	}
	rec, ok, err := tx.Profile(ref.Tenant, ref.ID, ref.Version)
	if err != nil {
		return err
	}
	if !ok || rec.Deleted || rec.Tenant != tenant && rec.Visibility != store.Public {
		return proto.Errorf(proto.NotFound, "profile %s/%s@%d, which the failed workflow ran, is not found: its owner deleted it or made it private; deploy a profile the tenant can use (`profiles list`)",
			ref.Tenant, ref.ID, ref.Version)
	}
	return nil
}

// lifecycleProfile is the request that runs the shipped profile id, "" when none does.
func lifecycleProfile(id string) Request {
	for req, tr := range transitions {
		for _, ref := range []string{tr.profile, tr.oob} {
			if name, _, _ := strings.Cut(ref, "@"); ref != "" && name == id {
				return req
			}
		}
	}
	return ""
}

// shippedRecord is the record of a shipped profile named id@version.
func shippedRecord(ref string) store.ProfileRecord {
	for _, p := range profile.Shipped() {
		if fmt.Sprintf("%s@%d", p.ID(), p.Version()) == ref {
			return store.ProfileRecord{Tenant: profile.ShippedTenant, ID: p.ID(), Version: p.Version(), Document: p.Document()}
		}
	}
	panic("metal: no shipped profile " + ref)
}

// withWipeMode is p with every disk.wipe's with.mode replaced by mode: the undeploy's
// wipe mode replaces the release profile's.
func withWipeMode(p *profile.Profile, mode string) (*profile.Profile, error) {
	var doc map[string]any
	if err := json.Unmarshal(p.Document(), &doc); err != nil {
		return nil, err
	}
	steps, _ := doc["steps"].([]any)
	for _, st := range steps {
		if m, ok := st.(map[string]any); ok && m["use"] == proto.CommandDiskWipe {
			m["with"] = map[string]any{"mode": mode}
		}
	}
	raw, err := proto.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return profile.Define(raw)
}

// ended moves the node as its workflow ended, in the transaction that ends it: to the
// state the request's success leaves it in (or into the next request of its chain), or
// to failed with the state it failed from and the failure. A release or commissioning
// whose disk wipe is not attested fails with UNVERIFIED_WIPE instead of becoming ready;
// a retire retires, keeping such a wipe as its metal.revokeIdentity recorded it.
func (s *Service) ended(tx *store.Tx, run store.Run) error {
	node, err := tx.Node(run.Node)
	if err != nil {
		return err
	}
	if node.Workflow != run.ID {
		return proto.Errorf(proto.Internal, "workflow %s ended, but node %s's workflow is %s", run.ID, node.ID, node.Workflow)
	}
	if run.State != store.RunSucceeded {
		if err := dropRamdiskTokens(tx, run); err != nil {
			return err
		}
	}
	req := Request(run.Kind)
	tr := transitions[req]
	failure := run.Failure
	wipe := unverifiedWipe(run)
	if failure == nil && wipe != nil && tr.succeeded == store.NodeReady {
		failure = wipe
	}
	if failure != nil && rescuedFromFailed(req, node) {
		// The node is failed again with the failure it had, which its retry runs again;
		// the rescue's own is its move's event (and the workflow's end).
		again, err := tx.UpdateNode(node.ID, func(n *store.Node) error { n.State, n.Next = store.NodeFailed, ""; return nil })
		if err != nil {
			return err
		}
		return stateEvent(tx, node.State, again, failure)
	}
	if failure != nil {
		_, err := updateNode(tx, node.ID, func(n *store.Node) error {
			n.State, n.FailedFrom, n.Failure, n.Next = store.NodeFailed, tr.during, failure, ""
			return nil
		})
		return err
	}
	if rec := wipeRecord(run, node.UnwipedRelease); rec != node.UnwipedRelease {
		if node, err = updateNode(tx, node.ID, func(n *store.Node) error { n.UnwipedRelease = rec; return nil }); err != nil {
			return err
		}
	}
	if node.Next != "" {
		next := Request(node.Next)
		_, _, err := s.begin(tx, node, next, Options{}, chainAfter(tx, node, next))
		return err
	}
	switch req {
	case Deploy:
		return s.deployEnded(tx, run)
	case Retire:
		_, err := updateNode(tx, node.ID, func(n *store.Node) error {
			// The node keeps the wipe its identity's revocation recorded (revokeIdentity):
			// a retry of a retire that revoked it could not wipe.
			n.State, n.Role, n.Profile, n.Host = store.NodeRetired, "", nil, nil
			return nil
		})
		return err
	case Release:
		released, err := updateNode(tx, node.ID, func(n *store.Node) error {
			n.State, n.Role, n.Profile, n.Host = store.NodeReady, "", nil, nil
			return nil
		})
		if err != nil {
			return err
		}
		return releasedNodeSpec(tx, released)
	}
	state := tr.succeeded
	if rescuedFromFailed(req, node) {
		state = store.NodeFailed
	}
	_, err = updateNode(tx, node.ID, func(n *store.Node) error { n.State = state; return nil })
	return err
}

// dropRamdiskTokens deletes the unused ramdisk join tokens run, which failed or was
// cancelled, minted (its boot.prepareRamdisk's): no step of it waits for that ramdisk any
// more. A run cancelled or failed after it prepared the boot (a rescue cancelled while
// the machine boots) would otherwise leave a token that admits a ramdisk of the node for
// the rest of its hour. A run that succeeded keeps them: a profile may prepare a ramdisk
// boot for after its end.
func dropRamdiskTokens(tx *store.Tx, run store.Run) error {
	_, err := tx.DeleteUnusedJoinTokensFor(store.TokenFor{Kind: store.TokenRamdisk, NodeID: run.Node, Workflow: run.ID})
	return err
}

// wipeRecord is the node's UnwipedRelease once run, which was, succeeded: a run that
// wiped the disks, every wipe attested (a release or commissioning on a pool whose
// machines run the agent), clears it; a release that wiped none (out of band) records
// itself; any other run keeps it.
func wipeRecord(run store.Run, was string) string {
	wiped := slices.ContainsFunc(run.Steps, func(st store.RunStep) bool {
		return st.Use == proto.CommandDiskWipe && st.State == store.StepSucceeded
	})
	switch {
	case wiped && unverifiedWipe(run) == nil:
		return ""
	case Request(run.Kind) == Release:
		return run.ID
	}
	return was
}

// chainAfter is the request the node's pool's policy.enrollment chains after req (after
// enroll, the chain's first), "" when none.
func chainAfter(tx *store.Tx, node store.Node, req Request) Request {
	pool, err := tx.Pool(node.Tenant, node.Pool)
	if err != nil {
		return ""
	}
	chain := chains[pool.Policy.Enrollment]
	i := slices.Index(chain, req)
	if req == Enroll {
		i = -1
	} else if i < 0 {
		return ""
	}
	if i+1 < len(chain) {
		return chain[i+1]
	}
	return ""
}

// wipeAdvice is what to do after a wipe w the registry did not attest: a disk that hid
// capacity from it fails every mode until that capacity is attached or given back out
// of band (docs/ramdisk.md, "Hidden capacity"); otherwise a stronger mode may do.
func wipeAdvice(w attest.Wipe) string {
	for _, d := range w.Disks {
		if len(d.Hidden) > 0 {
			return "no wipe mode reaches capacity a disk hides: " + hiddenAdvice + ", then release again, or retire the node"
		}
	}
	return "release again with a stronger mode (`nodes release ID --wipe secure-erase`) or retire the node"
}

// unverifiedWipe is the failure a run's disk wipes make: the first disk.wipe step that
// did not succeed, or whose result registry/attest did not attest; nil when every
// disk.wipe that ran was attested (or none was in the profile).
func unverifiedWipe(run store.Run) *store.StepFailure {
	for _, st := range run.Steps {
		if st.Use != proto.CommandDiskWipe || st.State == store.StepSkipped && !strings.HasPrefix(st.Reason, "not run") {
			continue
		}
		var w attest.Wipe
		switch {
		case st.State != store.StepSucceeded:
			why := "did not run"
			if st.Error != nil {
				why = "failed: " + st.Error.Message
			}
			return &store.StepFailure{RunID: run.ID, Step: st.Path(), Use: st.Use,
				Error: proto.Errorf(proto.UnverifiedWipe, "the disk wipe %s %s: the disks may hold data", st.Path(), why)}
		case json.Unmarshal(st.Result, &w) != nil || !w.Attested:
			return &store.StepFailure{RunID: run.ID, Step: st.Path(), Use: st.Use,
				Error: proto.Errorf(proto.UnverifiedWipe, "the disk wipe %s is not attested (%s): %s", st.Path(), w.Reason, wipeAdvice(w)).WithReason(proto.ReasonNotAttested)}
		}
	}
	return nil
}
