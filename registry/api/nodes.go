package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
)

// EnrollRequest is the body of metal.enroll.
type EnrollRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	Pool     string `json:"pool"`
	// MACs or ProductUUID name the machine; one of them is needed.
	MACs        []string `json:"macs,omitempty"`
	ProductUUID string   `json:"productUuid,omitempty"`
	BMC         BMC      `json:"bmc"`
	// HardwareProfile is the node's own; the pool's applies when it is left out.
	HardwareProfile string            `json:"hardwareProfile,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	// Drivers are per-node bindings by concern: a driver name or {driver, config}.
	Drivers map[string]Binding `json:"drivers,omitempty"`
}

// UpdateBMCRequest is the body of metal.updateBmc: what it gives replaces the node's BMC.
type UpdateBMCRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	NodeID   string `json:"nodeId"`
	Driver   string `json:"driver,omitempty"`
	Address  string `json:"address,omitempty"`
	// CredentialRef replaces the credential reference when given; "" removes it.
	CredentialRef *string `json:"credentialRef,omitempty"`
}

// NodeKey names a node.
type NodeKey struct {
	TenantID string `json:"tenantId,omitempty"`
	NodeID   string `json:"nodeId"`
}

// ListNodesRequest is the body of metal.list.
type ListNodesRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	// Pool lists one pool's nodes; all the tenant's when left out.
	Pool string `json:"pool,omitempty"`
	// State lists the nodes in one state; every state when left out.
	State string `json:"state,omitempty"`
	ListRequest
}

// NodeList is the answer of metal.list.
type NodeList struct {
	Nodes      []Node `json:"nodes"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// DeployRequest is the body of metal.deploy: a node and the profile version to deploy,
// resolved as profiles.get resolves it (a shipped id, else the tenant's own, else the
// platform's public one; TENANT/ID for another tenant's public profile; the latest
// version when left out).
type DeployRequest struct {
	TenantID       string `json:"tenantId,omitempty"`
	NodeID         string `json:"nodeId"`
	ProfileID      string `json:"profileId"`
	ProfileVersion int    `json:"profileVersion,omitempty"`
}

// DeployStarted is the answer of metal.deploy.
type DeployStarted struct {
	WorkflowID string     `json:"workflowId"`
	NodeID     string     `json:"nodeId"`
	Profile    ProfileRef `json:"profile"`
}

// TransitionRequest is the body of the lifecycle methods (metal.inspect, metal.release,
// metal.cancel, ...): a node, and for metal.release the disk wipe mode.
type TransitionRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	NodeID   string `json:"nodeId"`
	// Wipe replaces the release profile's disk.wipe mode: none, quick, secure-erase or
	// crypto-erase.
	Wipe string `json:"wipe,omitempty"`
}

// RemediateRequest is the body of metal.remediate: an active node, the shipped
// remediation profile to run on it (remediate-reboot or remediate-gpu-reset; the latest
// version when profileVersion is left out), and why, recorded on the node.
type RemediateRequest struct {
	TenantID       string `json:"tenantId,omitempty"`
	NodeID         string `json:"nodeId"`
	Profile        string `json:"profile"`
	ProfileVersion int    `json:"profileVersion,omitempty"`
	Reason         string `json:"reason,omitempty"`
}

// ConfirmMACRequest is the body of metal.confirmMac: a node enrolled by its product UUID
// alone and the MAC PXE discovery proposed for it.
type ConfirmMACRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	NodeID   string `json:"nodeId"`
	MAC      string `json:"mac"`
	// Force binds a MAC the machine's BMC does not list among its NICs: a boot NIC the
	// BMC does not see.
	Force bool `json:"force,omitempty"`
}

// TransitionStarted is the answer of the lifecycle methods: the node as the request left
// it, and the workflow it started (the cancelled one for metal.cancel; none when the
// request failed the node at once).
type TransitionStarted struct {
	WorkflowID string      `json:"workflowId,omitempty"`
	Profile    *ProfileRef `json:"profile,omitempty"`
	Node       Node        `json:"node"`
}

// lifecycleMethods are the lifecycle methods and their requests.
var lifecycleMethods = map[string]metal.Request{
	"metal.inspect": metal.Inspect, "metal.commission": metal.Commission, "metal.release": metal.Release,
	"metal.retire": metal.Retire, "metal.rescue": metal.Rescue, "metal.unrescue": metal.Unrescue,
	"metal.retry": metal.Retry, "metal.cancel": metal.Cancel,
}

// registerLifecycle adds the lifecycle methods: each makes its request of a node as
// metal's lifecycle table allows, and starts the workflow once it is stored.
func (s *Server) registerLifecycle(svc *metal.Service) {
	for method, req := range lifecycleMethods {
		Handle(s, method, ActionNodesManage, func(_ context.Context, c *Caller, in TransitionRequest) (TransitionStarted, error) {
			return s.lifecycle(svc, c, in.TenantID, in.NodeID, func(tx *store.Tx, tenant string) (store.Run, store.Node, error) {
				return svc.Act(tx, tenant, in.NodeID, req, metal.Options{Wipe: in.Wipe})
			})
		})
	}
	Handle(s, "metal.remediate", ActionNodesManage, func(_ context.Context, c *Caller, in RemediateRequest) (TransitionStarted, error) {
		return s.lifecycle(svc, c, in.TenantID, in.NodeID, func(tx *store.Tx, tenant string) (store.Run, store.Node, error) {
			return svc.Remediate(tx, tenant, in.NodeID, in.Profile, in.ProfileVersion, in.Reason)
		})
	})
}

// lifecycle makes a lifecycle request (act) through transition and answers with the
// node as the request left it and the workflow it started. A root caller asking about
// another tenant's node is told whose it is.
func (s *Server) lifecycle(svc *metal.Service, c *Caller, tenantID, node string, act func(tx *store.Tx, tenant string) (store.Run, store.Node, error)) (out TransitionStarted, err error) {
	run, err := s.transition(svc, c, tenantID, func(tx *store.Tx, tenant string) (store.Run, error) {
		run, n, err := act(tx, tenant)
		out.Node = nodeOf(n)
		return run, c.elsewhere(err, "nodeId", tenant, nodeOwner(tx, node))
	})
	if err == nil && run.ID != "" {
		out.WorkflowID, out.Profile = run.ID, refOf(&run.Profile)
	}
	return out, err
}

// transition makes a request of a node (act: a lifecycle request, a deploy) for the
// caller's tenant in one transaction, then starts the workflow it stored, if any. A
// refusal of a request made for another tenant names that tenant's flag in the commands
// it suggests (Caller.forTenant).
func (s *Server) transition(svc *metal.Service, c *Caller, tenantID string, act func(tx *store.Tx, tenant string) (store.Run, error)) (run store.Run, err error) {
	err = c.update(func(tx *store.Tx) error {
		tenant, err := c.TenantFor(tx, tenantID)
		if err != nil {
			return err
		}
		run, err = act(tx, tenant)
		return c.forTenant(err, tenant)
	})
	if err != nil || run.ID == "" {
		return run, err
	}
	svc.Start(run)
	return run, nil
}

// RegisterMetal adds the methods that need metal: pools (metal checks their policy),
// enrollment, nodes and deploy.
func (s *Server) RegisterMetal(svc *metal.Service) {
	s.registerPools(svc)
	s.registerInventory()
	s.registerAttestation()
	s.registerLifecycle(svc)
	s.registerRevocations(svc)
	ps := newProfiles(s)
	Handle(s, "metal.enroll", ActionNodesManage, func(_ context.Context, c *Caller, req EnrollRequest) (out Node, err error) {
		var run store.Run
		err = inTenant(c.update, c, req.TenantID, func(tx *store.Tx, tenant string) error {
			n, r, err := svc.Enroll(tx, metal.Enrollment{Tenant: tenant, Pool: req.Pool, MACs: req.MACs, ProductUUID: req.ProductUUID,
				BMC: store.BMC(req.BMC), HardwareProfile: req.HardwareProfile, Labels: req.Labels, Drivers: bindings(req.Drivers),
				Platform: c.Tenant == store.RootTenant})
			out, run = nodeOf(n), r
			return c.elsewhere(err, "pool", tenant, poolOwner(tx, req.Pool))
		})
		if err == nil {
			svc.Start(run)
		}
		return out, err
	})
	Handle(s, "metal.confirmMac", ActionNodesManage, func(_ context.Context, c *Caller, req ConfirmMACRequest) (out Node, err error) {
		err = inTenant(c.update, c, req.TenantID, func(tx *store.Tx, tenant string) error {
			n, err := svc.ConfirmMAC(tx, tenant, req.NodeID, req.MAC, req.Force)
			out = nodeOf(n)
			return c.elsewhere(err, "nodeId", tenant, nodeOwner(tx, req.NodeID))
		})
		return out, err
	})
	Handle(s, "metal.updateBmc", ActionNodesManage, func(_ context.Context, c *Caller, req UpdateBMCRequest) (out Node, err error) {
		err = inTenant(c.update, c, req.TenantID, func(tx *store.Tx, tenant string) error {
			n, err := svc.UpdateBMC(tx, metal.BMCUpdate{Tenant: tenant, Node: req.NodeID, Driver: req.Driver, Address: req.Address,
				CredentialRef: req.CredentialRef, Platform: c.Tenant == store.RootTenant})
			out = nodeOf(n)
			return c.elsewhere(bodyPathOfBMC(err), "nodeId", tenant, nodeOwner(tx, req.NodeID))
		})
		return out, err
	})
	Handle(s, "metal.get", ActionNodesRead, func(_ context.Context, c *Caller, req NodeKey) (out NodeView, err error) {
		err = c.view(func(tx *store.Tx) error {
			n, err := tenantNode(tx, c, req)
			if err != nil {
				return err
			}
			out, err = nodeView(tx, n)
			return err
		})
		return out, err
	})
	Handle(s, "metal.list", ActionNodesRead, func(_ context.Context, c *Caller, req ListNodesRequest) (out NodeList, err error) {
		if req.State != "" && !slices.Contains(metal.States(), req.State) {
			return out, proto.Errorf(proto.InvalidInput, "state %q: use one of %s", req.State, strings.Join(metal.States(), ", ")).WithPath("state")
		}
		out.Nodes, out.NextCursor, err = tenantPage(c, req.TenantID, req.ListRequest, func(tx *store.Tx, tenant string, page store.Page) ([]Node, string, error) {
			nodes, next, err := tx.Nodes(tenant, req.Pool, req.State, page)
			return viewsOf(nodes, nodeOf), next, err
		})
		return out, err
	})
	Handle(s, "metal.deploy", ActionNodesManage, func(_ context.Context, c *Caller, req DeployRequest) (DeployStarted, error) {
		run, err := s.transition(svc, c, req.TenantID, func(tx *store.Tx, tenant string) (store.Run, error) {
			key := ProfileKey{TenantID: req.TenantID, ID: req.ProfileID, ProfileVersion: req.ProfileVersion}
			rec, err := ps.resolveSaying(tx, c, key, deployable(key, tenant))
			if err != nil {
				return store.Run{}, profileIDAt(err)
			}
			run, err := svc.Deploy(tx, tenant, req.NodeID, rec)
			return run, c.elsewhere(err, "nodeId", tenant, nodeOwner(tx, req.NodeID))
		})
		if err != nil {
			return DeployStarted{}, err
		}
		return DeployStarted{WorkflowID: run.ID, NodeID: run.Node, Profile: ProfileRef(run.Profile)}, nil
	})
}

// deployable is what a root tenant's caller deploying key on a node of tenant is told
// of the tenant (owner) that holds the profile privately: --tenant owner would look for
// the node in owner's tenant, so the way is to make the profile one that tenant's deploy
// reaches: public (the platform's by its bare id, another tenant's as OWNER/ID) or a
// copy in tenant. Every command it names says its tenant, so that none is taken for
// tenant's (Caller.forTenant).
func deployable(key ProfileKey, tenant string) func(owner string) string {
	return func(owner string) string {
		version, as := "", key.ID
		if key.ProfileVersion > 0 {
			version = fmt.Sprintf(" --profile-version %d", key.ProfileVersion)
		}
		if owner != store.RootTenant {
			as = owner + "/" + key.ID + " (another tenant's public profile names no secret reference)"
		}
		return fmt.Sprintf("tenant %s has it, private: a deploy for tenant %s reaches %s's own profiles and the public ones, and --tenant %s would look for the node in %s. "+
			"Make it public (`profiles update %s --visibility public%s --tenant %s`) and deploy it as %s, "+
			"or copy it into %s (`profiles get %s%s --tenant %s --format json` shows its document; `profiles create FILE --tenant %s`)",
			owner, tenant, tenant, owner, owner, key.ID, version, owner, as, tenant, key.ID, version, owner, tenant)
	}
}

// profileIDAt is an error resolving a deploy's profile at the deploy's own field: what
// a ProfileKey calls id is its profileId; a fault of profileVersion stays at
// profileVersion, which the two share.
func profileIDAt(err error) error {
	e := proto.AsError(err)
	if e.Details.Path == "profileVersion" {
		return e
	}
	return e.WithPath("profileId")
}

// tenantNode returns one of the caller's tenant's nodes; another tenant's is NOT_FOUND
// (saying whose it is to the root tenant's callers only: Caller.elsewhere).
func tenantNode(tx *store.Tx, c *Caller, req NodeKey) (store.Node, error) {
	tenant, err := c.TenantFor(tx, req.TenantID)
	if err != nil {
		return store.Node{}, err
	}
	n, err := tx.Node(req.NodeID)
	if err != nil || n.Tenant != tenant {
		return store.Node{}, c.elsewhere(proto.Errorf(proto.NotFound, "node %q not found: %s", req.NodeID, store.NodesListed).WithPath("nodeId"), "nodeId", tenant, func() string { return n.Tenant })
	}
	return n, nil
}

// bindings are a request's driver bindings as metal takes them.
func bindings(in map[string]Binding) map[string]metal.Binding {
	if in == nil {
		return nil
	}
	out := make(map[string]metal.Binding, len(in))
	for concern, b := range in {
		out[concern] = metal.Binding(b)
	}
	return out
}

// bodyPathOfBMC is err of binding a node's BMC again (metal.Service.UpdateBMC), whose
// checks are enrollment's and put their refusals at the enrollment body's bmc.driver,
// bmc.address or bmc.credentialRef, at the field of metal.updateBmc's body that gave
// the value: driver, address or credentialRef.
func bodyPathOfBMC(err error) error {
	e, ok := errors.AsType[*proto.Error](err)
	if !ok {
		return err
	}
	if field, ok := strings.CutPrefix(e.Details.Path, "bmc."); ok {
		return e.WithPath(field)
	}
	return err
}
