package metal

import (
	"slices"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/profile"
	"github.com/better-compute/better-compute/registry/store"
)

// Deploy starts deploying a profile version (as the tenant resolved it) on one of the
// tenant's nodes, in tx: the run is created with the profile's rendered steps, the
// version is marked used, and the node becomes deploying. Start the returned run once tx
// has committed. Only a ready node deploys (the lifecycle table); another tenant's node
// is NOT_FOUND.
func (s *Service) Deploy(tx *store.Tx, tenant, nodeID string, rec store.ProfileRecord) (store.Run, error) {
	node, err := tx.Node(nodeID)
	if err != nil || node.Tenant != tenant {
		return store.Run{}, proto.Errorf(proto.NotFound, "node %q not found: `nodes list` shows the tenant's nodes", nodeID).WithPath(nodeField)
	}
	p, err := profile.DefineStored(rec.ID, rec.Version, rec.Document)
	if err != nil {
		return store.Run{}, err
	}
	switch {
	case p.Target() != profile.TargetMetal:
		return store.Run{}, proto.Errorf(proto.InvalidInput, "profile %s@%d is a %s profile; metal deploys metal profiles", rec.ID, rec.Version, p.Target()).WithPath("profile")
	case p.Entry() == "adopt":
		return store.Run{}, proto.Errorf(proto.InvalidInput, "profile %s@%d is an adopt profile, which carries no steps to deploy", rec.ID, rec.Version).WithPath("profile")
	case rec.Tenant == profile.ShippedTenant && lifecycleProfile(rec.ID) != "":
		return store.Run{}, proto.Errorf(proto.InvalidInput, "%s@%d runs in the node's lifecycle, not as a deploy: use `nodes %s`", rec.ID, rec.Version, lifecycleProfile(rec.ID)).WithPath("profile")
	case rec.Tenant == profile.ShippedTenant && slices.Contains(remediationProfiles, rec.ID):
		return store.Run{}, proto.Errorf(proto.InvalidInput, "%s@%d remediates an active node, not as a deploy: use `nodes remediate %s --profile %s`", rec.ID, rec.Version, nodeID, rec.ID).WithPath("profile")
	}
	pool, err := tx.Pool(node.Tenant, node.Pool)
	if err != nil {
		return store.Run{}, err
	}
	if err := checkMIGFromPool(p, pool); err != nil {
		return store.Run{}, err
	}
	if err := checkPlatformTrust(node, profileBindings(p)); err != nil {
		return store.Run{}, err
	}
	run, _, err := s.Act(tx, tenant, nodeID, Deploy, Options{Profile: &rec})
	return run, err
}

// deployFailsAtEnd is the end check of a deploy whose steps succeeded
// (workflow.EndCheck): a profile of another tenant that names a secret reference now (its
// pool no longer sets the unit that replaced the profile's, or the run began before the
// rule) fails the run, and with it the node (ended), rather than give the node a
// NodeSpec naming the reference (checkSecretRefs). Before, the node failed and the run
// was recorded succeeded.
func (s *Service) deployFailsAtEnd(tx *store.Tx, run store.Run) (*store.StepFailure, error) {
	node, err := tx.Node(run.Node)
	if err != nil || node.Next != "" {
		return nil, err
	}
	p, err := runProfile(tx, run)
	if err != nil {
		return nil, err
	}
	refused := checkSecretRefs(tx, node, run.Profile.Tenant, p)
	if proto.CodeOf(refused) == proto.InvalidState {
		return &store.StepFailure{RunID: run.ID, Error: proto.AsError(refused)}, nil
	}
	return nil, refused
}

// runProfile is the profile run runs, as its document defines it.
func runProfile(tx *store.Tx, run store.Run) (*profile.Profile, error) {
	doc, err := tx.RunDocument(run)
	if err != nil {
		return nil, err
	}
	return profile.Define(doc)
}

// deployEnded makes the node active as its deploy succeeded, with the profile's host
// config (the pool's units replacing the profile's) as its desired host section, and
// its NodeSpec. A profile the deploy's end check refused (deployFailsAtEnd) failed the
// run, and never comes here; its refusal is checked again all the same, in the same
// transaction, before any NodeSpec names the reference.
func (s *Service) deployEnded(tx *store.Tx, run store.Run) error {
	p, err := runProfile(tx, run)
	if err != nil {
		return err
	}
	node, err := tx.Node(run.Node)
	if err != nil {
		return err
	}
	if err := checkSecretRefs(tx, node, run.Profile.Tenant, p); err != nil {
		return err
	}
	pool, err := tx.Pool(node.Tenant, node.Pool)
	if err != nil {
		return err
	}
	node, err = updateNode(tx, run.Node, func(n *store.Node) error {
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

// endBytes is what the end of a run of req for node writes beside the run's record
// (workflow.NewRun.EndBytes): for a deploy of p, the host section deployEnded gives the
// node, as its pool's policy makes it now; 0 for another request.
func endBytes(tx *store.Tx, node store.Node, req Request, p *profile.Profile) (int, error) {
	if req != Deploy {
		return 0, nil
	}
	pool, err := tx.Pool(node.Tenant, node.Pool)
	if err != nil {
		return 0, err
	}
	host, err := proto.Marshal(hostSection(p, pool.Policy))
	return len(host), err
}

// releasedNodeSpec gives node, which a release left without profile, role and host
// section, a NodeSpec without the released installation's host section. The next
// installation's agent is pushed the stored NodeSpec at its first session, and handed
// the secrets its units name (secret.ForAgent): kept, the released installation's units
// (a k8s-join to its cluster, and the join token it names) reached the next one while
// its deploy ran, and for good when that deploy failed. A node never deployed has no
// NodeSpec and gets none.
func releasedNodeSpec(tx *store.Tx, node store.Node) error {
	if _, err := tx.NodeSpec(node.ID); proto.CodeOf(err) == proto.NotFound {
		return nil
	} else if err != nil {
		return err
	}
	_, err := tx.SetNodeSpec(NodeSpec(node))
	return err
}

// NodeSpec is the desired state of node's installed agent: its labels, its driver
// bindings and its host section.
func NodeSpec(node store.Node) proto.NodeSpec {
	return proto.NodeSpec{Node: node.ID, Role: proto.RoleNode, Labels: node.Labels, Drivers: protoBindings(node.Drivers), Host: node.HostSection()}
}
