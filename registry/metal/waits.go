package metal

import (
	"context"
	"encoding/json"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/workflow"
)

// Generations tells what a node's agent has applied of its desired NodeSpec.
type Generations interface {
	// WaitObserved returns once node's agent has applied (observed) a generation at
	// least its desired one, or ctx's error when ctx ends first.
	WaitObserved(ctx context.Context, node string) error
}

// waitAgentJoined is wait.agentJoined: with role node or ramdisk, it waits until the
// node's agent of that role has joined since the run started, from a boot of the
// machine other than the one its agent was of then (store.Run.BootID): that agent
// connecting again is no boot. With role site, it waits until the agent of the node's
// site is connected (workflow.Joins.WaitSiteAgent), at once when it is already: a site
// agent is no boot of the machine, and its session is the site's, not a join of the
// node. A node of no site fails it INVALID_STATE at node.site.
func (s *Service) waitAgentJoined(ctx context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	var with proto.WaitAgentJoined
	if err := json.Unmarshal(a.Step.With, &with); err != nil {
		return nil, proto.Errorf(proto.Internal, "wait.agentJoined: with does not decode: %w", err)
	}
	var err error
	switch {
	case with.Role != proto.RoleSite:
		err = s.cfg.Joins.WaitJoined(ctx, a.Node.ID, string(with.Role), a.Run.CreatedAt, a.Run.BootID)
	case a.Node.Site == "":
		err = proto.Errorf(proto.InvalidState, "wait.agentJoined role site: node %s is at no site, so it has no site agent to wait for: "+
			"wait for its ramdisk or node agent instead, or enroll the machine in a pool of a site", a.Node.ID).WithPath("node.site")
	default:
		err = s.cfg.Joins.WaitSiteAgent(ctx, a.Node.Site)
	}
	if err != nil {
		return nil, err
	}
	return proto.Marshal(proto.WaitAgentJoined{Role: with.Role})
}

// waitGenerationObserved is wait.generationObserved: it waits until the node's agent
// has applied its desired NodeSpec.
func (s *Service) waitGenerationObserved(ctx context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	if s.cfg.Generations == nil {
		return nil, proto.Errorf(proto.Unsupported, "wait.generationObserved needs the agent plane, which this registry does not run")
	}
	return nil, s.cfg.Generations.WaitObserved(ctx, a.Node.ID)
}
