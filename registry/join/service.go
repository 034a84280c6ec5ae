// Package join is the registry's side of the join: the well-known document that tells an
// agent where and whom to trust, join tokens (minted for one node, stored hashed,
// consumed once), and the JoinService that opens a sealed token, consumes it and answers
// a JoinResponse signed with the registry's signing key, carrying the agent's
// certificate.
package join

import (
	"context"
	"encoding/pem"
	"errors"
	"log/slog"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/store"
)

// Service is the JoinService.
type Service struct {
	store *store.Store
	keys  *pki.PKI
	// agentEndpoint is the first of the agent endpoints, the others are the rest of
	// them, when there are more.
	agentEndpoint  string
	agentEndpoints []string
	log            *slog.Logger
}

// NewService makes the JoinService. agentEndpoints are the agents' QUIC endpoints,
// host:port, as agents should dial them: this registry's, or every replica's (at least
// one).
func NewService(st *store.Store, keys *pki.PKI, agentEndpoints []string, log *slog.Logger) *Service {
	s := &Service{store: st, keys: keys, agentEndpoint: agentEndpoints[0], log: log}
	if len(agentEndpoints) > 1 {
		s.agentEndpoints = agentEndpoints
	}
	return s
}

// Join admits one agent: it opens the sealed token with the JoinService key, consumes
// the token, checks that its kind joins the claimed role and that it was minted for the
// claimed node, and that the site it names exists, and issues the agent's certificate,
// all in one transaction. Any refusal
// leaves the token as it was.
func (s *Service) Join(_ context.Context, req joinwire.Request) (joinwire.Response, error) {
	p, token, err := s.open(req)
	if err != nil {
		return joinwire.Response{}, err
	}
	var resp joinwire.Response
	var tok store.JoinToken
	err = s.store.Update(func(tx *store.Tx) error {
		if tok, err = tx.ConsumeJoinToken(token); err != nil {
			return err
		}
		if role := RoleOf(tok.Kind); role != p.Role {
			return proto.Errorf(proto.Forbidden, "join token %s is a %s token, which joins role %s, not %s", tok.ID, tok.Kind, role, p.Role).WithReason(proto.ReasonRole)
		}
		if tok.NodeID != p.NodeID {
			return proto.Errorf(proto.Forbidden, "join token %s was minted for node %q; refusing to admit it as %q", tok.ID, tok.NodeID, p.NodeID).WithReason(proto.ReasonIdentity)
		}
		if tok.Kind == store.TokenSite && tok.NodeID != tok.Site {
			// A token minted before its node id had to be its site's: the registry finds,
			// and revokes, a site's agent by the site's name.
			return proto.Errorf(proto.Forbidden, "join token %s admits %q as the agent of site %q: a site's agent is the site (mint a site token without --node-id)", tok.ID, tok.NodeID, tok.Site).WithReason(proto.ReasonIdentity)
		}
		epoch, err := tx.AgentEpoch(p.NodeID, proto.Role(p.Role))
		if err != nil {
			return err
		}
		if tok.Site != "" {
			// A token minted before sites were checked at minting may name none.
			if _, err := tx.Site(tok.Site); err != nil {
				return siteNotFound(err, tok.Site)
			}
		}
		der, err := s.keys.IssueAgentCertificate(p.NodeID, p.Role, epoch, p.PublicKey)
		if err != nil {
			return err
		}
		resp, err = joinwire.SignResponse(s.keys.JoinSigner(), joinwire.Payload{
			NodeID:         p.NodeID,
			Role:           p.Role,
			Site:           tok.Site,
			Certificate:    string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
			AgentCA:        string(s.keys.AgentCAPEM),
			AgentEndpoint:  s.agentEndpoint,
			AgentEndpoints: s.agentEndpoints,
		})
		return err
	})
	if err != nil {
		s.log.Warn("join refused", "node", p.NodeID, "role", p.Role, "token", tok.ID, "err", err)
		return joinwire.Response{}, err
	}
	s.log.Info("agent joined", "node", p.NodeID, "role", p.Role, "site", tok.Site, "token", tok.ID)
	return resp, nil
}

// open checks a join request's fields and opens its sealed token, bound to the claimed
// node, role and key.
func (s *Service) open(req joinwire.Request) (joinwire.Parsed, string, error) {
	p, err := req.Parse()
	if err != nil {
		return p, "", err
	}
	token, err := joinwire.OpenToken(s.keys.JoinDecrypter(), joinwire.AAD(p.NodeID, p.Role, p.SPKI), p.Sealed)
	if errors.Is(err, joinwire.ErrUnsealed) {
		return p, "", proto.Errorf(proto.Unauthenticated, "the sealed token does not open with this registry's join encryption key for node %q, role %s: check --join-encryption-pin", p.NodeID, p.Role).WithReason(proto.ReasonSealedToken)
	}
	return p, token, err
}
