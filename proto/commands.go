package proto

import (
	"slices"
	"strings"
	"time"
)

// Place is where a profile step runs: relayed to one of the agents (a role), or run by
// the registry itself.
type Place string

// The places.
const (
	// PlaceSite: relayed to the site agent of the machine's rack (its BMC and boot server).
	PlaceSite = Place(RoleSite)
	// PlaceRamdisk: relayed to the agent of the RAM disk the machine booted.
	PlaceRamdisk = Place(RoleRamdisk)
	// PlaceNode: relayed to the agent of the installed OS.
	PlaceNode = Place(RoleNode)
	// PlaceControlPlane: run by the registry itself.
	PlaceControlPlane Place = "control-plane"
)

// Places lists every place.
var Places = []Place{PlaceSite, PlaceRamdisk, PlaceNode, PlaceControlPlane}

// The kinds of the steps a profile names and of the commands the registry relays to
// agents for them. A relayed kind is both a step's `use` and its command's kind.
const (
	// Site commands: each carries a SiteCommand whose Input is the step's input.
	CommandGetPower       = "power.getPower"
	CommandSetPower       = "power.setPower"
	CommandSetBootDevice  = "management.setBootDevice"
	CommandInspectOOB     = "inspect.oob"
	CommandMediaInsert    = "media.insert"
	CommandMediaEject     = "media.eject"
	CommandPrepareRamdisk = "boot.prepareRamdisk"
	CommandBootCleanUp    = "boot.cleanUp"

	// Commands to the machine's own agent (its ramdisk or its installed OS).
	CommandInventoryRefresh = "inventory.refresh"
	CommandDiagDCGM         = "diag.dcgm"
	CommandDiskWipe         = "disk.wipe"
	CommandBootKexec        = "boot.kexec"
	// CommandDeployImage is the command deploy.deploy relays to a machine's ramdisk:
	// write one catalog image to the disk (DeployImage).
	CommandDeployImage = "deploy.image"

	// Steps the registry runs (they may relay commands of the kinds above).
	StepEnsureRamdisk          = "metal.ensureRamdisk"
	StepDeploy                 = "deploy.deploy"
	StepRenderUserData         = "userdata.render"
	StepWaitAgentJoined        = "wait.agentJoined"
	StepWaitGenerationObserved = "wait.generationObserved"
	StepRevokeIdentity         = "metal.revokeIdentity"
)

// StepKind is one kind of step: where it can run and, for a relayed one, what its
// command carries.
type StepKind struct {
	// Kind is the step's `use` (and, when relayed, its command's kind).
	Kind string
	// Runs lists the places the step can run; the first is where it runs by default.
	Runs []Place
	// Relays, for a step the registry runs on behalf of an agent's place, lists the
	// kinds of the commands it relays to that agent (deploy.deploy relays deploy.image);
	// the step's own kind is then never relayed. Empty for a step relayed under its own
	// kind to one of its places, and for one the control plane runs. A kind two steps
	// relay takes the places of both; one a step relays besides its own (a ramdisk's
	// inventory.refresh enrolls its TPM) is named by the step it belongs to (attest.boot).
	Relays []string
	// BMCConcern is, for a site command that reaches the machine's BMC, the concern of
	// the driver binding it opens (power, management, virtual-media); the registry
	// attaches the BMC's credential to these commands only.
	BMCConcern string
	// Input is a zero value of the typed input the agent decodes (the step's `with`, or
	// what the registry makes of it), nil for a step that takes none.
	Input any
	// Result is a zero value of the typed result the step answers with: the agent's
	// answer for a relayed command (a SignedResult over DCGMResult or DiskWipeResult for
	// the node-signed ones), what the registry records for a step it runs; nil for a
	// step that answers nothing (wait.generationObserved).
	Result any
}

// Steps is the table of step kinds, in the order the documentation gives them. The
// registry's profile catalog is derived from it, and the agents handle its kinds.
var Steps = []StepKind{
	{Kind: CommandGetPower, Runs: []Place{PlaceSite}, BMCConcern: "power", Result: GetPowerResult{}},
	{Kind: CommandSetPower, Runs: []Place{PlaceSite}, BMCConcern: "power", Input: SetPower{}, Result: SetPower{}},
	{Kind: CommandSetBootDevice, Runs: []Place{PlaceSite}, BMCConcern: "management", Input: SetBootDevice{}, Result: SetBootDevice{}},
	{Kind: CommandInspectOOB, Runs: []Place{PlaceSite}, BMCConcern: "power", Result: OOBInventory{}},
	{Kind: CommandMediaInsert, Runs: []Place{PlaceSite}, BMCConcern: "virtual-media", Input: MediaInsert{}, Result: MediaInsertResult{}},
	{Kind: CommandMediaEject, Runs: []Place{PlaceSite}, BMCConcern: "virtual-media", Result: MediaEjectResult{}},
	{Kind: CommandPrepareRamdisk, Runs: []Place{PlaceSite}, Input: PrepareRamdisk{}, Result: PrepareRamdiskResult{}},
	{Kind: CommandBootCleanUp, Runs: []Place{PlaceSite}, Result: BootCleanUpResult{}},
	{Kind: StepEnsureRamdisk, Runs: []Place{PlaceControlPlane}, Result: EnsureRamdiskResult{}},
	{Kind: CommandInventoryRefresh, Runs: []Place{PlaceRamdisk, PlaceNode}, Input: InventoryRefresh{}, Result: HardwareInventory{}},
	{Kind: CommandDiagDCGM, Runs: []Place{PlaceRamdisk, PlaceNode}, Input: DiagDCGM{}, Result: SignedResult{}},
	{Kind: CommandDiskWipe, Runs: []Place{PlaceRamdisk}, Input: DiskWipe{}, Result: SignedResult{}},
	{Kind: StepAttestBoot, Runs: []Place{PlaceRamdisk}, Relays: []string{CommandTPMEnroll, CommandTPMActivate, CommandTPMQuote}, Result: AttestBootResult{}},
	{Kind: StepDeploy, Runs: []Place{PlaceRamdisk}, Relays: []string{CommandDeployImage, CommandTPMQuote}, Result: DeployImageResult{}},
	{Kind: CommandBootKexec, Runs: []Place{PlaceRamdisk}, Result: BootKexecResult{}},
	{Kind: StepRenderUserData, Runs: []Place{PlaceControlPlane}, Result: UserDataRendered{}},
	{Kind: StepWaitAgentJoined, Runs: []Place{PlaceControlPlane}, Input: WaitAgentJoined{}, Result: WaitAgentJoined{}},
	{Kind: StepWaitGenerationObserved, Runs: []Place{PlaceControlPlane}},
	{Kind: StepRevokeIdentity, Runs: []Place{PlaceControlPlane}, Result: RevokeIdentityResult{}},
}

// LookupStep returns the step kind named kind.
func LookupStep(kind string) (StepKind, bool) {
	i := slices.IndexFunc(Steps, func(s StepKind) bool { return s.Kind == kind })
	if i < 0 {
		return StepKind{}, false
	}
	return Steps[i], true
}

// RelayRoles returns the roles whose agents run the relayed commands of kind: the places
// of the step relayed under that kind, or of the steps that relay it (Steps' Relays).
// The registry relays a command of a known kind to no other role. known is false for a
// kind neither a step nor relayed by one, which no agent of the project has a handler
// for; a kind of a step that is never relayed (the control plane's, deploy.deploy's) is
// known and no role runs it.
func RelayRoles(kind string) (roles []Role, known bool) {
	roles, known = relayRoles[kind]
	return slices.Clone(roles), known
}

// RolesText names roles for a message, "ramdisk or node".
func RolesText(roles []Role) string {
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = string(r)
	}
	return strings.Join(names, " or ")
}

// relayRoles is RelayRoles' table, derived from Steps.
var relayRoles = func() map[string][]Role {
	m := map[string][]Role{}
	for _, s := range Steps {
		kinds := s.Relays
		if len(kinds) == 0 {
			kinds = []string{s.Kind}
		}
		if _, ok := m[s.Kind]; !ok {
			m[s.Kind] = nil
		}
		for _, p := range s.Runs {
			if p == PlaceControlPlane {
				continue
			}
			for _, k := range kinds {
				if !slices.Contains(m[k], Role(p)) {
					m[k] = append(m[k], Role(p))
				}
			}
		}
	}
	return m
}()

// SiteBMCConcerns maps the kind of each site command that reaches a machine's BMC to the
// concern of the driver binding it opens (Steps' BMCConcern). The registry attaches the
// BMC's credential to these commands only.
var SiteBMCConcerns = func() map[string]string {
	m := map[string]string{}
	for _, s := range Steps {
		if s.BMCConcern != "" {
			m[s.Kind] = s.BMCConcern
		}
	}
	return m
}()

// SetPower is the input of power.setPower.
type SetPower struct {
	Action PowerAction `json:"action"`
}

// SetBootDevice is the input of management.setBootDevice: the device, at the next boot
// only or, persistent, at every boot.
type SetBootDevice struct {
	Device     BootDevice `json:"device"`
	Persistent bool       `json:"persistent"`
}

// GetPowerResult is the result of power.getPower.
type GetPowerResult struct {
	State PowerState `json:"state"`
}

// MediaInsertResult is the result of media.insert: the URL the BMC mounted or, on a BMC
// without virtual media, the digest of the ISO the machine boots by sanboot from the
// site cache.
type MediaInsertResult struct {
	Mounted string `json:"mounted,omitempty"`
	Sanboot string `json:"sanboot,omitempty"`
}

// MediaEjectResult is the result of media.eject.
type MediaEjectResult struct {
	Ejected bool `json:"ejected"`
}

// PrepareRamdiskResult is the result of boot.prepareRamdisk: the machine's boot entry.
type PrepareRamdiskResult struct {
	Kind BootKind `json:"kind"`
	MACs []string `json:"macs"`
}

// BootCleanUpResult is the result of boot.cleanUp.
type BootCleanUpResult struct {
	Removed bool `json:"removed"`
}

// BootKexecResult is the result of boot.kexec: empty, answered once the written OS's
// kernel is loaded; the machine boots it when the registry has the answer.
type BootKexecResult struct{}

// EnsureRamdiskResult is the result of metal.ensureRamdisk: whether the step booted the
// ramdisk (false: one ran on the machine already), and, when a ramdisk had run since the
// machine was last powered off or cycled but was gone, why it was booted again (its
// session ended at a time it names and it did not come back).
type EnsureRamdiskResult struct {
	Booted bool   `json:"booted"`
	Gone   string `json:"gone,omitempty"`
}

// UserDataRendered is the result of userdata.render, kept in the run for deploy.deploy:
// never the document or the token, only where the sealed document is, its kind and the
// id of the join token minted for it.
type UserDataRendered struct {
	UserDataRef string `json:"userDataRef"`
	Kind        string `json:"kind"`
	JoinTokenID string `json:"joinTokenId"`
}

// WaitAgentJoined is the input of wait.agentJoined, the agent whose join it waits for
// (the machine's ramdisk or node, or its site's agent being connected), and its result.
type WaitAgentJoined struct {
	Role Role `json:"role"`
}

// RevokeIdentityResult is the result of metal.revokeIdentity: when the node's agent
// identities were revoked, and how many unused join tokens of the node were deleted.
type RevokeIdentityResult struct {
	RevokedAt         time.Time `json:"revokedAt"`
	JoinTokensDeleted int       `json:"joinTokensDeleted"`
}
