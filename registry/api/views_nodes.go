package api

import (
	"encoding/json"
	"maps"
	"time"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
)

// Node is an enrolled machine as the API shows it.
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
	// PlatformBMC says that a root-tenant credential enrolled the node and bound its BMC.
	PlatformBMC bool `json:"platformBmc,omitempty"`
	// HardwareProfile is the node's own hardware profile; "" takes the pool's.
	HardwareProfile string            `json:"hardwareProfile,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	// DriverOverrides are the per-node bindings given at enrollment.
	DriverOverrides map[string]DriverBinding `json:"driverOverrides,omitempty"`
	// Drivers are the resolved bindings by concern.
	Drivers map[string]DriverBinding `json:"drivers"`
	State   string                   `json:"state"`
	// Role is the role the last successful deploy gave the node (host or dedicated).
	Role string `json:"role,omitempty"`
	// Profile is the profile the last successful deploy ran.
	Profile *ProfileRef `json:"profile,omitempty"`
	// Workflow is the id of the node's last workflow run.
	Workflow string `json:"workflowId,omitempty"`
	// Transition is the request that started the last workflow.
	Transition string `json:"transition,omitempty"`
	// Next is the request that starts when the running workflow succeeds.
	Next string `json:"next,omitempty"`
	// FailedFrom is the state the node failed from; "" unless it is failed.
	FailedFrom string `json:"failedFrom,omitempty"`
	// Failure is why the node failed; nil unless it is failed.
	Failure *StepFailure `json:"failure,omitempty"`
	// UnverifiedWipe is the disk wipe of the retire that could not be attested.
	UnverifiedWipe *StepFailure `json:"unverifiedWipe,omitempty"`
	// UnwipedRelease is the workflow of the node's last release when it wiped no disk
	// (out of band): a pool whose machines run the agent deploys the node once a
	// commissioning wiped them. "" otherwise.
	UnwipedRelease string `json:"unwipedRelease,omitempty"`
	// MACProposal is the boot MAC PXE discovery proposes; nil when there is none.
	MACProposal *MACProposal `json:"macProposal,omitempty"`
	// BMCMACs are the MACs of the NICs the machine's BMC listed at its last inspect.oob.
	BMCMACs []string `json:"bmcMacs,omitempty"`
	// BoundMAC is the MAC PXE discovery proposed and that was bound.
	BoundMAC string `json:"boundMac,omitempty"`
	// Remediation is the node's last remediation; nil when none ran.
	Remediation *Remediation `json:"remediation,omitempty"`
	// Host is the node's desired host section, in the order bcd applies its units.
	Host []HostUnit `json:"host,omitempty"`
	// PoweredAt is when a power action other than on last stopped what ran on the machine.
	PoweredAt time.Time `json:"poweredAt,omitzero"`
	// IdentityRevokedAt is when metal.revokeIdentity ran; zero while the identity holds.
	IdentityRevokedAt time.Time `json:"identityRevokedAt,omitzero"`
	// IdentityEpoch is the machine's installation: raised as a deploy, a release or a
	// retire starts; its agents' certificates of an earlier one are refused.
	IdentityEpoch int64 `json:"identityEpoch"`
	// IdentityEpochAt is when IdentityEpoch was last raised; zero when it never was, or
	// was raised before the registry recorded when.
	IdentityEpochAt time.Time `json:"identityEpochAt,omitzero"`
	// AgentsRevoked is the operator's last revocation of the certificates of the
	// machine's agents (nodes revoke-identity); nil when there was none.
	AgentsRevoked *Revocation `json:"agentsRevoked,omitempty"`
	// Rev counts the node's changes.
	Rev       int       `json:"rev"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// BMC is how the site agent reaches a machine's BMC: the credential is a reference
// (secret://...), never the secret.
type BMC struct {
	Driver        string `json:"driver"`
	Address       string `json:"address"`
	CredentialRef string `json:"credentialRef,omitempty"`
}

// DriverBinding is a driver bound to a concern, with its configuration.
type DriverBinding struct {
	Driver string          `json:"driver"`
	Config json.RawMessage `json:"config,omitempty"`
}

// ProfileRef names one version of a tenant's profile.
type ProfileRef struct {
	Tenant  string `json:"tenantId"`
	ID      string `json:"id"`
	Version int    `json:"version"`
}

// StepFailure is the step of a workflow that failed, and its error.
type StepFailure struct {
	RunID string       `json:"workflowId"`
	Step  string       `json:"step"`
	Use   string       `json:"use"`
	Error *proto.Error `json:"error"`
}

// MACProposal is a boot MAC PXE discovery saw at a site for a node.
type MACProposal struct {
	MAC    string    `json:"mac"`
	Site   string    `json:"siteId"`
	SeenAt time.Time `json:"seenAt"`
}

// Remediation is one remediation of a node: what ran, why, and whether the pool's
// policy started it.
type Remediation struct {
	Profile   ProfileRef `json:"profile"`
	Workflow  string     `json:"workflowId"`
	Reason    string     `json:"reason"`
	Automatic bool       `json:"automatic,omitempty"`
	// Streak counts the policy's remediations in a row this one ends (0 by hand): at 3
	// the policy remediates the node no more until an operator acts on it.
	Streak int       `json:"streak,omitempty"`
	At     time.Time `json:"at"`
}

// HostUnit is one host-config unit of a node's host section.
type HostUnit struct {
	Unit     string          `json:"unit"`
	Settings json.RawMessage `json:"settings,omitempty"`
}

func nodeOf(n store.Node) Node {
	v := Node{ID: n.ID, Tenant: n.Tenant, Pool: n.Pool, Site: n.Site, MACs: n.MACs, ProductUUID: n.ProductUUID, BMC: BMC(n.BMC),
		PlatformBMC: n.PlatformBMC, HardwareProfile: n.HardwareProfile, Labels: n.Labels,
		DriverOverrides: bindingsOf(n.DriverOverrides), Drivers: bindingsOf(n.Drivers), State: n.State, Role: n.Role,
		Profile: refOf(n.Profile), Workflow: n.Workflow, Transition: n.Transition, Next: n.Next, FailedFrom: n.FailedFrom,
		Failure: failureOf(n.Failure), UnverifiedWipe: failureOf(n.UnverifiedWipe), UnwipedRelease: n.UnwipedRelease, BMCMACs: n.BMCMACs, BoundMAC: n.BoundMAC,
		PoweredAt: n.PoweredAt, IdentityRevokedAt: n.IdentityRevokedAt,
		IdentityEpoch: n.IdentityEpoch, IdentityEpochAt: n.IdentityEpochAt, Rev: n.Rev, CreatedAt: n.CreatedAt, UpdatedAt: n.UpdatedAt}
	if v.AgentsRevoked = revocationOf(n.AgentsRevoked); v.AgentsRevoked != nil && v.AgentsRevoked.FailedWorkflowID != "" {
		v.AgentsRevoked.FailedWorkflowNext = metal.RunAgain(n.AgentsRevoked.FailedKind, n.ID)
	}
	if n.MACProposal != nil {
		p := MACProposal(*n.MACProposal)
		v.MACProposal = &p
	}
	if r := n.Remediation; r != nil {
		v.Remediation = &Remediation{Profile: ProfileRef(r.Profile), Workflow: r.Workflow, Reason: r.Reason, Automatic: r.Automatic, Streak: r.Streak, At: r.At}
	}
	for _, u := range n.Host {
		v.Host = append(v.Host, HostUnit(u))
	}
	return v
}

func bindingsOf(bs map[string]store.DriverBinding) map[string]DriverBinding {
	if bs == nil {
		return nil
	}
	out := make(map[string]DriverBinding, len(bs))
	for concern, b := range maps.All(bs) {
		out[concern] = DriverBinding(b)
	}
	return out
}

func refOf(r *store.ProfileRef) *ProfileRef {
	if r == nil {
		return nil
	}
	v := ProfileRef(*r)
	return &v
}

func failureOf(f *store.StepFailure) *StepFailure {
	if f == nil {
		return nil
	}
	v := StepFailure(*f)
	return &v
}

// Binding is a per-node driver binding as metal.enroll takes it: a driver name, or
// {driver, config}.
type Binding DriverBinding

// ShapeJSON checks a binding's shape as metal checks one (jsondoc.Shaper), so that a
// malformed binding in a body is refused at its path (drivers.power).
func (Binding) ShapeJSON(r *jsondoc.Report, v *jsondoc.Value, p jsondoc.Path) {
	metal.Binding{}.ShapeJSON(r, v, p)
}

// UnmarshalJSON reads a binding as metal reads one.
func (b *Binding) UnmarshalJSON(data []byte) error {
	var m metal.Binding
	if err := m.UnmarshalJSON(data); err != nil {
		return err
	}
	*b = Binding(m)
	return nil
}

// NodeStates are the states a node can be in, as metal.list's state names them.
func NodeStates() []string { return metal.States() }

// The states of nodes, runs and steps that clients following an answer look for.
const (
	NodeFailed  = store.NodeFailed
	RunRunning  = store.RunRunning
	StepPending = store.StepPending
	StepRunning = store.StepRunning
	StepSkipped = store.StepSkipped
)
