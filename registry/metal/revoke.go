package metal

import (
	"context"
	"encoding/json"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// Identities ends the agent sessions of revoked nodes, and those of an earlier
// installation.
type Identities interface {
	// Revoked ends the open agent sessions of node, whose identity is revoked.
	Revoked(node string)
	// Reinstalled ends the open sessions of node's agents (its installed OS's and its
	// ramdisk's) whose certificates belong to an earlier installation than the node's
	// identity epoch now.
	Reinstalled(node string)
}

// reinstalls are the requests whose workflow takes the machine away from its installed
// OS: each moves the node's identity epoch as it starts, so that the certificates of the
// installed OS's agent, and of any ramdisk booted before, stop working
// (store.Tx.CheckAgent). Rescue does not: unrescue boots the same installed OS again.
var reinstalls = []Request{Deploy, Release, Retire}

// revokeIdentity is metal.revokeIdentity: it marks the node's identity revoked, once
// (running it again keeps the first time), and deletes its unused join tokens, in one
// transaction; then it ends the node's open agent sessions. From then on the registry
// refuses the node's joins, sessions, secrets and new join tokens.
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
	if s.cfg.Identities != nil {
		s.cfg.Identities.Revoked(a.Node.ID)
	}
	return json.Marshal(proto.RevokeIdentityResult{RevokedAt: at, JoinTokensDeleted: deleted})
}
