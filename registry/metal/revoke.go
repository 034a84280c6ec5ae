package metal

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// AgentsRevoked is what RevokeAgents did.
type AgentsRevoked struct {
	// Node is the node as the revocation left it.
	Node store.Node
	// JoinTokensDeleted counts the node's unused join tokens it deleted.
	JoinTokensDeleted int
	// Failed is the node's workflow it failed, marked cancelled (cutOff: it ran at the
	// identity epoch that moved); zero when none did. Start it once the transaction has
	// committed, which abandons the attempt it is on.
	Failed store.Run
}

// RevokeAgents revokes, in tx, every certificate of the agents of one of tenant's nodes
// (its installed OS's and its ramdisk's) issued so far (nodes revoke-identity): it moves
// the node's identity epoch as a reinstall does, records why (reason, checked as
// proto.OperatorReason checks it) and which credential asked (by) on the node and in its
// event log, and deletes the node's unused join tokens, which may have leaked with the
// certificates. The node keeps its state and its identity: its agents join again with a
// join token minted after this. Its agents' sessions end as tx commits, on every replica
// (store.Store.OnNodeIdentity). The node's running workflow, when the move cuts it off
// (cutOff), fails at once, FORBIDDEN, reason agents-revoked, its error saying who
// revoked the agents, why, and what works (RunAgain): it could only wait out its step's
// timeout.
// Another tenant's node is NOT_FOUND; a retired node, whose identity is revoked for
// good, INVALID_STATE.
func (s *Service) RevokeAgents(tx *store.Tx, tenant, nodeID, reason, by string) (AgentsRevoked, error) {
	node, err := tx.Node(nodeID)
	if err != nil || node.Tenant != tenant {
		return AgentsRevoked{}, proto.Errorf(proto.NotFound, "node %q not found: `nodes list` shows the tenant's nodes", nodeID).WithPath(nodeField)
	}
	if reason, err = proto.OperatorReason(reason); err != nil {
		return AgentsRevoked{}, err
	}
	if node.RevokedIdentity() != nil {
		return AgentsRevoked{}, proto.Errorf(proto.InvalidState, "node %s is retired: its identity is revoked for good already", nodeID).WithPath(nodeField).WithReason(node.State)
	}
	cut, err := cutOff(tx, node)
	if err != nil {
		return AgentsRevoked{}, err
	}
	var out AgentsRevoked
	out.Node, err = updateNode(tx, nodeID, func(n *store.Node) error {
		n.NewIdentityEpoch(tx.Now())
		n.AgentsRevoked = &store.Revocation{Epoch: n.IdentityEpoch, At: tx.Now(), Reason: reason, By: by, FailedWorkflow: cut.ID, FailedKind: cut.Kind}
		return nil
	})
	if err != nil {
		return AgentsRevoked{}, err
	}
	if out.JoinTokensDeleted, err = tx.DeleteUnusedJoinTokens(nodeID); err != nil {
		return AgentsRevoked{}, err
	}
	who, detail := "an operator", reason
	if by != "" {
		who = "credential " + by
		detail += ", by credential " + by
	}
	e := store.Event{Node: node.ID, Tenant: node.Tenant, Kind: store.EventAgentsRevoked, To: fmt.Sprintf("epoch %d", out.Node.IdentityEpoch), Detail: detail}
	if cut.ID != "" {
		e.Workflow, e.Error = cut.ID, proto.Errorf(proto.Forbidden, "node %s's agents were revoked by %s, for the reason %q (nodes revoke-identity), while this %s workflow ran at the "+
			"identity epoch that moved: every certificate of the node's agents is refused and its unused join tokens are deleted, so the agents this workflow works with "+
			"were cut off and its join tokens deleted, and it cannot complete. Once the machine is trusted again, %s",
			node.ID, who, reason, cut.Kind, RunAgain(cut.Kind, node.ID)).WithReason(proto.ReasonAgentsRevoked)
		if out.Failed, err = s.cfg.Engine.Fail(tx, cut.ID, e.Error); err != nil {
			return AgentsRevoked{}, err
		}
		e.Detail += fmt.Sprintf("; failed workflow %s (the %s running at the epoch that moved: the agents it works with and its join tokens were cut off; once the machine is trusted again, %s)",
			cut.ID, cut.Kind, RunAgain(cut.Kind, node.ID))
	}
	_, err = tx.AppendEvent(e)
	return out, err
}

// reinstalls are the requests whose workflow takes the machine away from its installed
// OS: each moves the node's identity epoch as it starts (and deletes the node's unused
// join tokens, which would join at the new epoch), so that the certificates of the
// installed OS's agent, and of any ramdisk booted before, stop working
// (store.Tx.CheckAgent), and the registry ends their open sessions, whichever replica
// holds them, as the transaction that moves it commits (store.Store.OnNodeIdentity).
// Rescue does not: unrescue boots the same installed OS again.
var reinstalls = []Request{Deploy, Release, Retire}

// revokeIdentity is metal.revokeIdentity: it marks the node's identity revoked, once
// (running it again keeps the first time), records with it the wipe of the retire that
// revokes it (the node's UnverifiedWipe: its run's disk.wipe steps, which all come
// before, the step being the retire profiles' last), and deletes its unused join tokens,
// in one transaction, whose commit ends the node's open agent sessions, whichever
// replica holds them (store.Store.OnNodeIdentity). From then on the registry refuses the
// node's joins, sessions, secrets and new join tokens, so a retry of the retire, whose
// ramdisk cannot join to wipe, keeps the wipe recorded here.
func (s *Service) revokeIdentity(_ context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	var at time.Time
	var deleted int
	err := a.Update(func(tx *store.Tx) error {
		run, err := tx.Run(a.Run.ID)
		if err != nil {
			return err
		}
		n, err := updateNode(tx, a.Node.ID, func(n *store.Node) error {
			if n.IdentityRevokedAt.IsZero() {
				n.IdentityRevokedAt, n.UnverifiedWipe = tx.Now(), unverifiedWipe(run)
			}
			return nil
		})
		if err != nil {
			return err
		}
		at = n.IdentityRevokedAt
		deleted, err = tx.DeleteUnusedJoinTokens(a.Node.ID)
		return err
	})
	if err != nil {
		return nil, err
	}
	return proto.Marshal(proto.RevokeIdentityResult{RevokedAt: at, JoinTokensDeleted: deleted})
}
