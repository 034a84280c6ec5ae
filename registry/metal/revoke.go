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

// RevokeAgents revokes, in tx, every certificate of the agents of one of tenant's nodes
// (its installed OS's and its ramdisk's) issued so far (nodes revoke-identity): it moves
// the node's identity epoch as a reinstall does, records why (reason, checked as
// proto.OperatorReason checks it) and which credential asked (by) on the node and in its
// event log, and deletes the node's unused join tokens, which may have leaked with the
// certificates. The node keeps its state and its identity: its agents join again with a
// join token minted after this. Its agents' sessions end as tx commits, on every replica
// (store.Store.OnNodeIdentity). Another
// tenant's node is NOT_FOUND; a retired node, whose identity is revoked for good,
// INVALID_STATE.
func (s *Service) RevokeAgents(tx *store.Tx, tenant, nodeID, reason, by string) (store.Node, int, error) {
	node, err := tx.Node(nodeID)
	if err != nil || node.Tenant != tenant {
		return store.Node{}, 0, proto.Errorf(proto.NotFound, "node %q not found: `nodes list` shows the tenant's nodes", nodeID).WithPath("nodeId")
	}
	if reason, err = proto.OperatorReason(reason); err != nil {
		return node, 0, err
	}
	if node.RevokedIdentity() != nil {
		return node, 0, proto.Errorf(proto.InvalidState, "node %s is retired: its identity is revoked for good already", nodeID).WithReason(node.State)
	}
	node, err = updateNode(tx, nodeID, func(n *store.Node) error {
		n.NewIdentityEpoch(tx.Now())
		n.AgentsRevoked = &store.Revocation{Epoch: n.IdentityEpoch, At: tx.Now(), Reason: reason, By: by}
		return nil
	})
	if err != nil {
		return node, 0, err
	}
	detail := reason
	if by != "" {
		detail += ", by credential " + by
	}
	if _, err := tx.AppendEvent(store.Event{Node: node.ID, Tenant: node.Tenant, Kind: store.EventAgentsRevoked,
		To: fmt.Sprintf("epoch %d", node.IdentityEpoch), Detail: detail}); err != nil {
		return node, 0, err
	}
	deleted, err := tx.DeleteUnusedJoinTokens(nodeID)
	return node, deleted, err
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
// (running it again keeps the first time), and deletes its unused join tokens, in one
// transaction, whose commit ends the node's open agent sessions, whichever replica holds
// them (store.Store.OnNodeIdentity). From then on the registry refuses the node's joins,
// sessions, secrets and new join tokens.
func (s *Service) revokeIdentity(_ context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	var at time.Time
	var deleted int
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		n, err := updateNode(tx, a.Node.ID, func(n *store.Node) error {
			if n.IdentityRevokedAt.IsZero() {
				n.IdentityRevokedAt = tx.Now()
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
	return json.Marshal(proto.RevokeIdentityResult{RevokedAt: at, JoinTokensDeleted: deleted})
}
