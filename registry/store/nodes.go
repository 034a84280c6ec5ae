package store

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"

	"github.com/better-compute/better-compute/proto"
)

// The states of a metal node. registry/metal's lifecycle table says which request
// moves a node from which state, and where the end of its workflow leaves it.
const (
	// NodeEnrolling: metal-enroll runs, reading the machine's power state and BMC.
	NodeEnrolling = "enrolling"
	// NodeInspecting: metal-inspect runs.
	NodeInspecting = "inspecting"
	// NodeCommissioning: metal-commission runs.
	NodeCommissioning = "commissioning"
	// NodeReady: nothing deployed, disks wiped or never used: deployable.
	NodeReady = "ready"
	// NodeDeploying: a deploy workflow runs.
	NodeDeploying = "deploying"
	// NodeActive: the last deploy succeeded; the node converges to its host section.
	NodeActive = "active"
	// NodeReleasing: metal-release runs: the disks are wiped.
	NodeReleasing = "releasing"
	// NodeRetiring: metal-retire runs.
	NodeRetiring = "retiring"
	// NodeRetired: terminal: the identity is revoked.
	NodeRetired = "retired"
	// NodeRemediating: a remediation profile (remediate-reboot, remediate-gpu-reset) runs
	// on an active node; its success makes it active again.
	NodeRemediating = "remediating"
	// NodeRescue: the machine runs (or boots into, or leaves) the ramdisk for repairs.
	NodeRescue = "rescue"
	// NodeFailed: a workflow failed or was cancelled; FailedFrom and Failure say where
	// and why.
	NodeFailed = "failed"
	// nodeEnrolledV1 is the state nodes were enrolled in before the lifecycle: read as
	// ready, since they were deployable.
	nodeEnrolledV1 = "enrolled"
)

// TransitionRescue is the Transition of a rescue (registry/metal's rescue request): its
// success leaves the machine in its ramdisk, whose certificate stays good past the
// rescue's end, until the node's next workflow starts (Tx.CheckAgent).
const TransitionRescue = "rescue"

// Node is one enrolled machine.
type Node struct {
	ID     string `json:"id"`
	Tenant string `json:"tenantId"`
	Pool   string `json:"pool"`
	Site   string `json:"siteId"`
	// MACs are the machine's boot interfaces, lower-case and colon-separated.
	MACs []string `json:"macs,omitempty"`
	// ProductUUID is the SMBIOS product UUID, lower-case.
	ProductUUID string `json:"productUuid,omitempty"`
	BMC         BMC    `json:"bmc"`
	// PlatformBMC says that a root-tenant credential enrolled the node, binding its BMC's
	// address and credential: only then may the credential be the platform's
	// (secret://platform/NAME) and the address a socket of the site host.
	PlatformBMC bool `json:"platformBmc,omitempty"`
	// HardwareProfile is the node's own hardware profile; "" takes the pool's.
	HardwareProfile string            `json:"hardwareProfile,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	// DriverOverrides are the per-node bindings given at enrollment; they win over the
	// BMC's and the hardware profile's.
	DriverOverrides map[string]DriverBinding `json:"driverOverrides,omitempty"`
	// PlatformOverrides says that a root-tenant credential gave DriverOverrides (enrolled
	// the node): only then do their trust options stand under the platform's credential.
	PlatformOverrides bool `json:"platformOverrides,omitempty"`
	// Drivers are the resolved bindings by concern.
	Drivers map[string]DriverBinding `json:"drivers"`
	State   string                   `json:"state"`
	// Role is the role the last successful deploy gave the node (host or dedicated).
	Role string `json:"role,omitempty"`
	// Profile is the profile the last successful deploy ran.
	Profile *ProfileRef `json:"profile,omitempty"`
	// Workflow is the id of the node's last workflow run.
	Workflow string `json:"workflowId,omitempty"`
	// Transition is the request that started the last workflow (enroll, inspect,
	// commission, deploy, release, retire, rescue, unrescue).
	Transition string `json:"transition,omitempty"`
	// Next is the request that starts when the running workflow succeeds: enrollment on
	// a pool that inspects or commissions its machines chains them.
	Next string `json:"next,omitempty"`
	// FailedFrom is the state the node failed from; "" unless it is failed.
	FailedFrom string `json:"failedFrom,omitempty"`
	// Failure is why the node failed: the workflow, its step and the error; nil unless
	// the node is failed.
	Failure *StepFailure `json:"failure,omitempty"`
	// UnverifiedWipe is the disk wipe of the retire that revoked the node's identity
	// when it could not be attested (or did not run): the retire went on, and its
	// metal.revokeIdentity records it, which a retry of that retire keeps.
	UnverifiedWipe *StepFailure `json:"unverifiedWipe,omitempty"`
	// UnwipedRelease is the workflow of the node's last release when it wiped no disk
	// (metal-release-oob@1, on a pool with agent: none): the disks may hold what their
	// last user left. "" once a release or commissioning wiped them, every wipe
	// attested. A pool whose machines run the agent does not deploy such a node.
	UnwipedRelease string `json:"unwipedRelease,omitempty"`
	// MACProposal is the boot MAC PXE discovery proposes for a node enrolled by its
	// product UUID alone; nil when there is none.
	MACProposal *MACProposal `json:"macProposal,omitempty"`
	// BMCMACs are the MACs of the NICs the machine's BMC listed at its last inspect.oob
	// (lower-case, sorted); a MAC PXE discovery proposes is bound only when it is one of
	// them, when there are any.
	BMCMACs []string `json:"bmcMacs,omitempty"`
	// BoundMAC is the MAC PXE discovery proposed and that was bound (metal.confirmMac, or
	// at once on a pool with policy.trustProvisioningNetwork): one of MACs, which
	// inventory.refresh requires the machine's NICs to include.
	BoundMAC string `json:"boundMac,omitempty"`
	// Remediation is the node's last remediation: what ran, why and who asked; nil when
	// none ran.
	Remediation *Remediation `json:"remediation,omitempty"`
	// Host is the node's desired host section: host-config units in the order bcd
	// applies them.
	Host []HostUnit `json:"host,omitempty"`
	// PoweredAt is when a power action other than on last stopped what ran on the
	// machine: a ramdisk that joined before it is gone.
	PoweredAt time.Time `json:"poweredAt,omitzero"`
	// IdentityRevokedAt is when metal.revokeIdentity ran; zero while the identity holds.
	IdentityRevokedAt time.Time `json:"identityRevokedAt,omitzero"`
	// IdentityEpoch counts the workflows that took the machine away from its installed
	// OS (a deploy, a release, a retire: metal moves it as it starts one). Every
	// certificate of the machine's agents (roles node and ramdisk) names the epoch it
	// was issued in (proto.IdentityEpoch); one of an earlier epoch belongs to an earlier
	// installation and is refused (CheckAgent).
	IdentityEpoch int64 `json:"identityEpoch,omitempty"`
	// IdentityEpochAt is when IdentityEpoch last moved: a machine's agent that joined
	// before then holds a certificate of an earlier installation. Zero when it never
	// moved, or moved before this was recorded.
	IdentityEpochAt time.Time `json:"identityEpochAt,omitzero"`
	// AgentsRevoked is the operator's last revocation of the certificates of the
	// machine's agents (nodes revoke-identity), which moved IdentityEpoch without a
	// workflow; nil when there was none.
	AgentsRevoked *Revocation `json:"agentsRevoked,omitempty"`
	// Rev counts the record's changes.
	Rev       int       `json:"rev"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Remediation is one remediation of a node.
type Remediation struct {
	Profile  ProfileRef `json:"profile"`
	Workflow string     `json:"workflowId"`
	// Reason says why it ran: the operator's words, or the pool policy's rule.
	Reason string `json:"reason"`
	// Automatic is true when the pool's policy.remediation started it.
	Automatic bool `json:"automatic,omitempty"`
	// Streak counts, for an automatic remediation, the automatic remediations in a row
	// it ends: those that followed each other on the node, with no other workflow
	// between them, each within a day of the one before. 0 by hand.
	Streak int       `json:"streak,omitempty"`
	At     time.Time `json:"at"`
}

// BMC is how the site agent reaches a machine's baseboard management controller. The
// credential is a reference (secret://...), never the secret.
type BMC struct {
	Driver        string `json:"driver"`
	Address       string `json:"address"`
	CredentialRef string `json:"credentialRef,omitempty"`
}

// DriverBinding names the driver serving one concern and its configuration.
type DriverBinding struct {
	Driver string          `json:"driver"`
	Config json.RawMessage `json:"config,omitempty"`
}

// HostUnit is one unit of a node's host section: its name and its settings document,
// when included, as proto/hostunit decodes it.
type HostUnit struct {
	Unit     string          `json:"unit"`
	Settings json.RawMessage `json:"settings,omitempty"`
}

const (
	bucketNodes = "nodes"
	// bucketNodesByPool indexes nodes: tenant \0 pool \0 id -> nothing.
	bucketNodesByPool = "nodes_by_pool"
	// bucketNodesByHW maps "mac:<mac>" and "uuid:<uuid>" to the node id: a machine is
	// enrolled once.
	bucketNodesByHW = "nodes_by_hw"
)

// MaxNodeMACs bounds a node's MACs: a machine boots from a handful of NICs, a large
// server's a few dozen ports (as its BMC's, bounded alike). Each MAC is an entry of the
// hardware and site indexes (nodes_by_hw, nodes_by_site_mac) and travels in its site's
// boot entries (proto.BootEntry.MACs), pushed in one agent frame: before, one enrollment
// the size of a request carried some 127,000 of them.
const MaxNodeMACs = 64

// CreateNode enrolls a machine in an existing pool of its tenant and returns it with its
// new id, in state enrolling unless it gives another. A MAC or product UUID enrolled
// already (the UUID in either spelling: uuidNode) is CONFLICT, naming the node only when
// it is the same tenant's: another tenant's node ids stay its own; so is a BMC another
// tenant's node binds (indexBMC). A node past the tenant's bound (TenantBounds.Nodes,
// retired ones counted) is INVALID_STATE, reason quota, at pool, unless the platform
// enrolls it (PlatformBMC): the machines are the operator's to allot.
func (t *Tx) CreateNode(n Node) (Node, error) {
	pool, err := t.Pool(n.Tenant, n.Pool)
	if err != nil {
		return n, proto.AsError(err).WithPath("pool")
	}
	if len(n.MACs) == 0 && n.ProductUUID == "" {
		return n, proto.Errorf(proto.InvalidInput, "a machine is enrolled by its MACs or its product UUID: give one").WithPath("macs")
	}
	if len(n.MACs) > MaxNodeMACs {
		return n, proto.Errorf(proto.InvalidInput, "%d MACs: a machine is enrolled with at most %d, its boot interfaces", len(n.MACs), MaxNodeMACs).
			WithPath("macs").WithReason(proto.ReasonTooLarge)
	}
	n.ID, n.Site, n.Rev = "nd_"+randomHex(8), pool.Site, 1
	if n.State == "" {
		n.State = NodeEnrolling
	}
	n.CreatedAt, n.UpdatedAt = t.now, t.now
	hw := hwKeys(n)
	for i, k := range hw {
		id, path := t.getRaw(bucketNodesByHW, []byte(k)), "macs"
		if i >= len(n.MACs) {
			id, path = t.uuidNode(n.ProductUUID), "productUuid"
		}
		if id != nil {
			owner, err := t.Node(string(id))
			if err != nil && proto.CodeOf(err) != proto.NotFound {
				return n, err
			}
			if owner.Tenant != n.Tenant {
				return n, proto.Errorf(proto.Conflict, "%s is enrolled already, by another tenant: a machine is enrolled once; if it is yours, ask the platform's operators", k).WithPath(path)
			}
			return n, proto.Errorf(proto.Conflict, "%s is enrolled already as node %s", k, id).WithPath(path)
		}
	}
	if err := t.indexBMC(Node{}, n); err != nil {
		return n, err
	}
	if err := t.admitBy(countNodes, n.Tenant, "pool", n.PlatformBMC); err != nil {
		return n, err
	}
	for _, k := range hw {
		if err := t.putRaw(bucketNodesByHW, []byte(k), []byte(n.ID)); err != nil {
			return n, err
		}
	}
	if err := t.putRaw(bucketNodesByPool, nodePoolKey(n), nil); err != nil {
		return n, err
	}
	if err := t.indexSiteMACs(Node{}, n); err != nil {
		return n, err
	}
	if err := t.indexNodeProfile(Node{}, n); err != nil {
		return n, err
	}
	return n, t.put(bucketNodes, []byte(n.ID), n)
}

func hwKeys(n Node) []string {
	var keys []string
	for _, m := range n.MACs {
		keys = append(keys, "mac:"+m)
	}
	if n.ProductUUID != "" {
		keys = append(keys, "uuid:"+n.ProductUUID)
	}
	return keys
}

func nodePoolKey(n Node) []byte { return []byte(n.Tenant + "\x00" + n.Pool + "\x00" + n.ID) }

// Node returns one node, NOT_FOUND when there is none of that id.
func (t *Tx) Node(id string) (Node, error) {
	var n Node
	ok, err := t.get(bucketNodes, []byte(id), &n)
	if err == nil && !ok {
		err = notFound("node", id)
	}
	if n.State == nodeEnrolledV1 {
		n.State = NodeReady
	}
	return n, err
}

// RevokedIdentity is FORBIDDEN, with the reason identity-revoked, once metal.revokeIdentity
// has revoked the node's identity; nil before.
func (n Node) RevokedIdentity() error { return n.identity().revoked() }

// CheckAgent checks the certificate of one of the node's agents (role node or ramdisk)
// that names epoch: FORBIDDEN, reason identity-revoked, once the node's identity is
// revoked (RevokedIdentity); for an epoch older than the node's FORBIDDEN, with the
// reason revoked when the epoch last moved by an operator's revocation (nodes
// revoke-identity), else earlier-installation (the machine was released, redeployed or
// retired since the certificate was issued).
func (n Node) CheckAgent(role proto.Role, epoch int64) error {
	return n.identity().checkAgent(role, epoch)
}

// nodeIdentity is the part of a node's record its agents' certificates are checked
// against, with the tenant whose machine it is, its fields named as Node's: read alone,
// it costs less than half of the whole node, on every session's hello, NodeSpec push and
// relayed command (Tx.CheckAgent, Tx.CheckAgentOf).
// Its last workflow, the request that started it and the run of its failure are
// what a ramdisk's certificate is checked against beside (ramdiskRun).
type nodeIdentity struct {
	ID                string      `json:"id"`
	Tenant            string      `json:"tenantId"`
	IdentityRevokedAt time.Time   `json:"identityRevokedAt"`
	IdentityEpoch     int64       `json:"identityEpoch"`
	AgentsRevoked     *Revocation `json:"agentsRevoked"`
	Workflow          string      `json:"workflowId"`
	Transition        string      `json:"transition"`
	Failure           *failedRun  `json:"failure"`
}

// failedRun is the run of a node's Failure, read alone (nodeIdentity).
type failedRun struct {
	RunID string `json:"workflowId"`
}

// failedRunID is the run of the node's failure, "" when it has none.
func (n nodeIdentity) failedRunID() string {
	if n.Failure == nil {
		return ""
	}
	return n.Failure.RunID
}

func (n Node) identity() nodeIdentity {
	id := nodeIdentity{n.ID, n.Tenant, n.IdentityRevokedAt, n.IdentityEpoch, n.AgentsRevoked, n.Workflow, n.Transition, nil}
	if n.Failure != nil {
		id.Failure = &failedRun{n.Failure.RunID}
	}
	return id
}

// identity reads node id's identity; false for an id no node has (a site agent's),
// without an error made and thrown away.
func (t *Tx) identity(id string) (nodeIdentity, bool, error) {
	var n nodeIdentity
	ok, err := t.get(bucketNodes, []byte(id), &n)
	return n, ok, err
}

func (n nodeIdentity) revoked() error {
	if n.IdentityRevokedAt.IsZero() {
		return nil
	}
	return proto.Errorf(proto.Forbidden, "the identity of node %s was revoked on %s (metal.revokeIdentity): a retired machine does not join or connect again as this node", n.ID, n.IdentityRevokedAt.Format(time.RFC3339)).WithReason(proto.ReasonIdentityRevoked)
}

func (n nodeIdentity) checkAgent(role proto.Role, epoch int64) error {
	if err := n.revoked(); err != nil || epoch >= n.IdentityEpoch {
		return err
	}
	if r := n.AgentsRevoked; r != nil && r.Epoch == n.IdentityEpoch {
		return r.refusal(n.ID, role, epoch)
	}
	agent, next := "installed OS agent", "the agent of the machine's current OS joins with the token its user data carries"
	if role == proto.RoleRamdisk {
		agent, next = "ramdisk", "the ramdisk a workflow boots now joins with the token of that boot"
	}
	return proto.Errorf(proto.Forbidden, "the certificate of node %s's %s belongs to an earlier installation (epoch %d; the node is at %d: "+
		"it was released, redeployed or retired since): %s", n.ID, agent, epoch, n.IdentityEpoch, next).
		WithReason(proto.ReasonEarlierInstallation)
}

// CheckIdentity is the RevokedIdentity of node id; an id no node has (a site agent's)
// passes.
func (t *Tx) CheckIdentity(id string) error {
	n, ok, err := t.identity(id)
	if err != nil || !ok {
		return err
	}
	return n.revoked()
}

// NewIdentityEpoch moves the node's identity epoch on, at: every certificate its
// agents hold so far belongs to an earlier epoch and is refused (CheckAgent).
func (n *Node) NewIdentityEpoch(at time.Time) {
	n.IdentityEpoch++
	n.IdentityEpochAt = at
}

// AgentEpoch is the identity epoch a certificate of agent id in role issued now names
// (proto.IdentityEpoch): for a machine's agent (role node or ramdisk) its node's, after
// CheckIdentity's check; for a site agent its site's. An id no node, or for a site
// agent no site, has is at 0.
func (t *Tx) AgentEpoch(id string, role proto.Role) (int64, error) {
	if role == proto.RoleSite {
		s, _, err := t.siteIdentity(id)
		return s.IdentityEpoch, err
	}
	n, ok, err := t.identity(id)
	if err != nil || !ok {
		return 0, err
	}
	return n.IdentityEpoch, n.revoked()
}

// CheckAgent checks the certificate of the agent c names, wherever one is taken: for a
// machine's agent, against its node (Node.CheckAgent: its identity epoch), and for its
// ramdisk also against the node's workflow (ramdiskRun); for a site agent, against its
// site (Site.CheckAgent). An id no node, or for a site agent no site, has passes.
func (t *Tx) CheckAgent(c proto.AgentCredential) error {
	_, err := t.CheckAgentOf(c)
	return err
}

// CheckAgentOf is CheckAgent, and also says, from the same read, whose machine's agent
// it is: the node's tenant, "" for a site agent (the platform's) or an id no node has.
func (t *Tx) CheckAgentOf(c proto.AgentCredential) (tenant string, err error) {
	if c.Role == proto.RoleSite {
		s, ok, err := t.siteIdentity(c.Node)
		if err != nil || !ok {
			return "", err
		}
		return "", s.checkAgent(c.Epoch)
	}
	n, ok, err := t.identity(c.Node)
	if err != nil || !ok {
		return "", err
	}
	return n.Tenant, n.check(c, t.runRunning)
}

// check checks the certificate of one of node n's agents that names c: its identity
// epoch (checkAgent) and, for a ramdisk, its workflow run (ramdiskRun), running telling
// whether a run runs.
func (n nodeIdentity) check(c proto.AgentCredential, running func(run string) bool) error {
	if err := n.checkAgent(c.Role, c.Epoch); err != nil || c.Role != proto.RoleRamdisk {
		return err
	}
	return n.ramdiskRun(c.Run, running)
}

// ramdiskRun checks the certificate of node n's ramdisk that names run (proto.AgentRun):
// it is good only while run is the node's running workflow (the one whose
// boot.prepareRamdisk or metal.ensureRamdisk minted the token it joined with), or the
// rescue that booted it and succeeded, which leaves the machine in its ramdisk until the
// node's next workflow starts (unrescue, retire, or from failed a retry, release or
// rescue). One that names no run (an operator's token, or one issued before
// certificates named their run) is taken for the node's last workflow's. Otherwise
// FORBIDDEN, reason run-ended: a ramdisk's key travels in its machine's memory and its
// token in a boot script over plain HTTP, so a host that held either would pass for the
// node's ramdisk (its hello, reports, answers) for the certificate's year, until the
// node's identity epoch moved. running is asked of the node's last workflow alone:
// Tx.CheckAgent reads one key of the running runs' index (runRunning), a commit's hooks
// know whether it ended that workflow (NodeChange).
func (n nodeIdentity) ramdiskRun(run string, running func(run string) bool) error {
	of := "workflow " + run
	switch {
	case run == "" && n.Workflow == "":
		of = "no workflow, and none ran on the node"
	case run == "":
		run, of = n.Workflow, "no workflow, taken for the node's last"
	}
	if run == n.Workflow && run != "" &&
		(running(run) || n.Transition == TransitionRescue && n.failedRunID() != run) {
		return nil
	}
	return proto.Errorf(proto.Forbidden, "the certificate of node %s's ramdisk is of %s, which no longer runs: "+
		"a ramdisk's certificate is good while the workflow that booted it runs, a rescue's until the node's next workflow starts; a workflow that needs a ramdisk boots one of its own",
		n.ID, of).WithReason(proto.ReasonRunEnded)
}

// Nodes lists tenant's nodes, those of one pool when pool is set and those in one state
// when state is set, one page at a time.
func (t *Tx) Nodes(tenant, pool, state string, p Page) ([]Node, string, error) {
	prefix := tenant + "\x00"
	if pool != "" {
		prefix += pool + "\x00"
	}
	out := []Node{}
	next, err := t.scan(bucketNodesByPool, []byte(prefix), p, func(k, _ []byte) (func(), error) {
		n, err := t.Node(string(k[bytes.LastIndexByte(k, 0)+1:]))
		if err != nil || state != "" && n.State != state {
			return nil, err
		}
		return func() { out = append(out, n) }, nil
	})
	return out, next, err
}

// UpdateNode changes a node through change and stores it. The id, tenant, pool and
// hardware keys never change; which state may follow which is registry/metal's
// lifecycle table, the one writer of node states. A new BMC binding another tenant's
// node binds is CONFLICT, and a retired node releases its BMC (indexBMC). A change of
// its desired host section leaves its NodeSpec as it was (keepNodeSpecHost).
func (t *Tx) UpdateNode(id string, change func(*Node) error) (Node, error) {
	old, err := t.Node(id)
	if err != nil {
		return old, err
	}
	n := old
	if err := change(&n); err != nil {
		return old, err
	}
	if n.ID != old.ID || n.Tenant != old.Tenant || n.Pool != old.Pool || !slices.Equal(hwKeys(n), hwKeys(old)) {
		return old, proto.Errorf(proto.Internal, "node %s: id, tenant, pool and hardware keys are fixed at enrollment", id)
	}
	if err := t.indexBMC(old, n); err != nil {
		return old, err
	}
	if err := t.indexSiteMACs(old, n); err != nil {
		return old, err
	}
	if err := t.indexNodeProfile(old, n); err != nil {
		return old, err
	}
	if !sameHost(old.Host, n.Host) {
		if err := t.keepNodeSpecHost(old); err != nil {
			return old, err
		}
	}
	n.Rev, n.UpdatedAt = old.Rev+1, t.now
	if err := t.put(bucketNodes, []byte(id), n); err != nil {
		return old, err
	}
	if ended := slices.Contains(t.endedRuns, n.Workflow); ended || identityChanged(old, n) {
		t.store.watch.nodeIdentity.afterCommit(t, NodeChange{Node: n, WorkflowEnded: ended})
	}
	return n, nil
}

// identityChanged reports whether node n, changed from old, may refuse a certificate of
// its agents old passed: its identity epoch moved or its identity was revoked, or its
// workflow, the request that started it or its failure changed (ramdiskRun).
func identityChanged(old, n Node) bool {
	was, is := old.identity(), n.identity()
	return is.IdentityEpoch != was.IdentityEpoch || !is.IdentityRevokedAt.Equal(was.IdentityRevokedAt) ||
		is.Workflow != was.Workflow || is.Transition != was.Transition || is.failedRunID() != was.failedRunID()
}

// NodeChange is a node as a commit stored it, told to the OnNodeIdentity hooks, and
// whether that commit ended the node's workflow (Node.Workflow).
type NodeChange struct {
	Node
	// WorkflowEnded says the commit ended the run Node.Workflow names (Tx.UpdateRun
	// made it succeeded or failed); on etcd, after lost watch events, that it was found
	// ended.
	WorkflowEnded bool `json:"-"`
}

// CheckAgent is Tx.CheckAgent of the certificate of one of the node's agents that names
// c, against the node as the commit stored it, with no read: its identity epoch
// (Node.CheckAgent) and, for a ramdisk, its workflow run, which runs unless the commit
// ended it. A run that ended in an earlier commit refused its ramdisk then, and at its
// every hello since.
func (n NodeChange) CheckAgent(c proto.AgentCredential) error {
	return n.identity().check(c, func(string) bool { return !n.WorkflowEnded })
}

// OnNodeIdentity registers fn to be called after every commit that changed a node's
// identity (its identity epoch moved, or its identity was revoked), began another of
// its workflows, or ended its workflow (a run's end writes its node in the transaction
// that ends it: registry/metal moves its state), with the node as stored and whether
// the commit ended its workflow, until the returned cancel is called: the agents of the
// node whose certificates no longer pass NodeChange.CheckAgent are to be let go. fn
// runs on the committing goroutine after the store's locks are released, so it must
// return quickly. On etcd it also runs for every node another replica wrote (changed
// identity or not: the watch tells the record, not what changed), on the store's watch
// goroutine: at least once, in commit order, before the hooks of any later commit.
func (s *Store) OnNodeIdentity(fn func(NodeChange)) (cancel func()) {
	return s.watch.nodeIdentity.add(fn)
}
