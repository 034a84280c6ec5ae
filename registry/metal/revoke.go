package metal

import (
	"context"
	"encoding/json"
	"time"

	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/workflow"
)

// revokeIdentity is metal.revokeIdentity: it marks the node's identity revoked, once;
// running it again keeps the first time.
func (s *Service) revokeIdentity(_ context.Context, a *workflow.Attempt) (json.RawMessage, error) {
	var at time.Time
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		n, err := tx.UpdateNode(a.Node.ID, func(n *store.Node) error {
			if n.IdentityRevokedAt.IsZero() {
				n.IdentityRevokedAt = tx.Now()
			}
			return nil
		})
		at = n.IdentityRevokedAt
		return err
	})
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]time.Time{"revokedAt": at})
}
