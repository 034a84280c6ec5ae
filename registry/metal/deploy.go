package metal

import (
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// kindDeploy is the workflow kind of metal.deploy.
const kindDeploy = "deploy"

// Deploy starts deploying a profile version (as the tenant resolved it) on one of the
// tenant's nodes, in tx: the run is created with the profile's rendered steps, the
// version is marked used, and the node becomes deploying. Start the returned run once tx
// has committed. A node that is deploying already is INVALID_STATE; another tenant's node
// is NOT_FOUND.
func (s *Service) Deploy(tx *store.Tx, tenant, nodeID string, rec store.ProfileRecord) (store.Run, error) {
	node, err := tx.Node(nodeID)
	if err != nil || node.Tenant != tenant {
		return store.Run{}, proto.Errorf(proto.NotFound, "node %q not found: `nodes list` shows the tenant's nodes", nodeID).WithPath("nodeId")
	}
	p, err := profile.Define(rec.Document)
	if err != nil {
		return store.Run{}, proto.Errorf(proto.InvalidState, "stored profile %s@%d no longer passes the checks (%v): run `profiles validate`", rec.ID, rec.Version, err)
	}
	switch {
	case p.Target() != profile.TargetMetal:
		return store.Run{}, proto.Errorf(proto.InvalidInput, "profile %s@%d is a %s profile; metal deploys metal profiles", rec.ID, rec.Version, p.Target()).WithPath("profile")
	case p.Entry() == "adopt":
		return store.Run{}, proto.Errorf(proto.InvalidInput, "profile %s@%d is an adopt profile, which carries no steps to deploy", rec.ID, rec.Version).WithPath("profile")
	}
	if node.State == store.NodeDeploying {
		return store.Run{}, proto.Errorf(proto.InvalidState, "node %s is deploying already (workflow %s): wait for it to end", nodeID, node.Workflow)
	}
	run, err := s.cfg.Engine.Create(tx, workflow.NewRun{Kind: kindDeploy, Node: node.ID, Tenant: tenant,
		Profile: store.ProfileRef{Tenant: rec.Tenant, ID: rec.ID, Version: rec.Version}, Define: p})
	if err != nil {
		return run, err
	}
	_, err = tx.UpdateNode(node.ID, func(n *store.Node) error {
		n.State, n.Workflow, n.Failure = store.NodeDeploying, run.ID, nil
		return nil
	})
	return run, err
}

// deployEnded moves the node out of deploying as the run ended: active with the
// profile's host config (the pool's units replacing the profile's) as its desired host
// section, or failed with the step that failed and its error.
func (s *Service) deployEnded(tx *store.Tx, run store.Run) error {
	if run.State == store.RunFailed {
		_, err := tx.UpdateNode(run.Node, func(n *store.Node) error {
			n.State, n.Failure = store.NodeFailed, run.Failure
			return nil
		})
		return err
	}
	p, err := profile.Define(run.Document)
	if err != nil {
		return err
	}
	node, err := tx.Node(run.Node)
	if err != nil {
		return err
	}
	pool, err := tx.Pool(node.Tenant, node.Pool)
	if err != nil {
		return err
	}
	node, err = tx.UpdateNode(run.Node, func(n *store.Node) error {
		ref := run.Profile
		n.State, n.Failure, n.Profile, n.Role, n.Host = store.NodeActive, nil, &ref, p.Role(), hostSection(p, pool.Policy)
		return nil
	})
	if err != nil {
		return err
	}
	_, err = tx.SetNodeSpec(NodeSpec(node))
	return err
}

// NodeSpec is the desired state of node's installed agent: its labels, its driver
// bindings and its host section.
func NodeSpec(node store.Node) proto.NodeSpec {
	spec := proto.NodeSpec{Node: node.ID, Role: proto.RoleNode, Labels: node.Labels}
	for concern, b := range node.Drivers {
		if spec.Drivers == nil {
			spec.Drivers = map[string]proto.DriverBinding{}
		}
		spec.Drivers[concern] = proto.DriverBinding{Driver: b.Driver, Config: b.Config}
	}
	for _, u := range node.Host {
		spec.Host = append(spec.Host, proto.HostUnit{Unit: u.Unit, Settings: u.Settings})
	}
	return spec
}
