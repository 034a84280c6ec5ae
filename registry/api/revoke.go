package api

import (
	"context"
	"time"

	"github.com/better-compute/better-compute/registry/metal"
	"github.com/better-compute/better-compute/registry/store"
)

// RevokeNodeCertificatesRequest is the body of metal.revokeCertificates.
type RevokeNodeCertificatesRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	NodeID   string `json:"nodeId"`
	// Reason is recorded with the revocation; "an operator asked" when left out.
	Reason string `json:"reason,omitempty"`
}

// RevokeSiteCertificatesRequest is the body of sites.revokeCertificates.
type RevokeSiteCertificatesRequest struct {
	SiteID string `json:"siteId"`
	// Reason is recorded with the revocation; "an operator asked" when left out.
	Reason string `json:"reason,omitempty"`
}

// CertificatesRevoked is the answer of metal.revokeCertificates and
// sites.revokeCertificates: the identity whose agents' certificates were revoked, the
// identity epoch the certificates issued from now on name (every one naming an
// earlier epoch is refused), the unused join tokens deleted with them, and the node's
// workflow the revocation failed.
type CertificatesRevoked struct {
	NodeID            string    `json:"nodeId,omitempty"`
	SiteID            string    `json:"siteId,omitempty"`
	IdentityEpoch     int64     `json:"identityEpoch"`
	RevokedAt         time.Time `json:"revokedAt"`
	Reason            string    `json:"reason"`
	JoinTokensDeleted int       `json:"joinTokensDeleted"`
	// FailedWorkflowID is the node's running workflow the revocation failed (FORBIDDEN,
	// reason agents-revoked: it ran at the identity epoch that moved, so its agents and
	// join tokens were cut off); left out when none was.
	FailedWorkflowID string `json:"failedWorkflowId,omitempty"`
	// FailedWorkflowNext is, with FailedWorkflowID, what works once the machine is
	// trusted again, for the failed workflow's kind (metal.RunAgain).
	FailedWorkflowNext string `json:"failedWorkflowNext,omitempty"`
}

func revokedOf(r *store.Revocation, deleted int) CertificatesRevoked {
	return CertificatesRevoked{IdentityEpoch: r.Epoch, RevokedAt: r.At, Reason: r.Reason, JoinTokensDeleted: deleted}
}

// registerRevocations adds metal.revokeCertificates (a node's agents, in the caller's
// tenant, as the other node requests) and sites.revokeCertificates (a site's agent, the
// root tenant's credentials only, as the other site requests). Each revokes in one
// transaction, then ends the agents' sessions whose certificates it revoked; a node's
// abandons the attempt of the workflow it failed.
func (s *Server) registerRevocations(svc *metal.Service) {
	Handle(s, "metal.revokeCertificates", ActionNodesManage, func(_ context.Context, c *Caller, req RevokeNodeCertificatesRequest) (out CertificatesRevoked, err error) {
		var failed store.Run
		err = inTenant(c.update, c, req.TenantID, func(tx *store.Tx, tenant string) error {
			r, err := svc.RevokeAgents(tx, tenant, req.NodeID, req.Reason, c.CredentialID)
			if err != nil {
				return c.elsewhere(err, "nodeId", tenant, nodeOwner(tx, req.NodeID))
			}
			failed = r.Failed
			out = revokedOf(r.Node.AgentsRevoked, r.JoinTokensDeleted)
			out.NodeID, out.FailedWorkflowID = r.Node.ID, failed.ID
			if failed.ID != "" {
				out.FailedWorkflowNext = metal.RunAgain(failed.Kind, r.Node.ID)
			}
			return nil
		})
		if err != nil {
			return out, err
		}
		if failed.ID != "" {
			// The failed run is marked cancelled: starting it abandons its attempt.
			svc.Start(failed)
		}
		s.log.Warn("node agents' certificates revoked", "node", out.NodeID, "epoch", out.IdentityEpoch, "reason", out.Reason, "credential", c.CredentialID,
			"workflow", out.FailedWorkflowID)
		return out, nil
	})
	Handle(s, "sites.revokeCertificates", ActionSitesManage, func(_ context.Context, c *Caller, req RevokeSiteCertificatesRequest) (out CertificatesRevoked, err error) {
		if err := sitesRootOnly(c); err != nil {
			return out, err
		}
		err = c.update(func(tx *store.Tx) error {
			if _, err := requestedSite(tx, req.SiteID); err != nil {
				return err
			}
			st, deleted, err := tx.RevokeSiteAgent(req.SiteID, store.Revocation{Reason: req.Reason, By: c.CredentialID})
			if err != nil {
				return err
			}
			out = revokedOf(st.AgentRevoked, deleted)
			out.SiteID = st.ID
			return nil
		})
		if err != nil {
			return out, err
		}
		s.log.Warn("site agent's certificates revoked", "site", out.SiteID, "epoch", out.IdentityEpoch, "reason", out.Reason, "credential", c.CredentialID)
		return out, nil
	})
}
