package metal

import (
	"context"
	"encoding/json"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// reinstalls are the requests whose workflow takes the machine away from its installed
// OS: each moves the node's identity epoch as it starts, so that the certificates of the
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
