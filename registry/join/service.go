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
	// reuses and observer learn of each used token presented again (OnReuse).
	reuses   Reuses
	observer Observer
}

// Reuses is told of each join token presented again after its join: its secret opened
// and matched, so whoever presents it holds it. The registry's metal service records it
// on the token's node and contains it (metal.Service.TokenReused).
type Reuses interface {
	// TokenReused tells of tok, used by its join from tok.UsedFrom, presented again
	// from from ("" when the call had no address).
	TokenReused(ctx context.Context, tok store.JoinToken, from string) error
}

// Observer counts the join tokens presented again after their join, by kind and by how
// the address they came from compares with their join's (store.JoinToken.ReusedFrom).
type Observer interface {
	JoinTokenReused(kind, address string)
}

// OnReuse sets who learns of each join token presented again after its join; either may
// be nil.
func (s *Service) OnReuse(r Reuses, o Observer) {
	s.reuses, s.observer = r, o
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

// Join admits one agent, whose call came from the address from ("" for none): it opens
// the sealed token with the JoinService key, consumes the token (recording from as the
// address of its join), checks that its kind joins the claimed role and that it was
// minted for the claimed node, and that the site it names exists, and issues the agent's
// certificate, recording on the token the identity epoch the certificate names, all in
// one transaction. Any refusal leaves the token as it was. A token used already is
// refused token-used, and its reuse told (reused), unless it comes beside the key its
// join certified: that join's own request sent again (bcd join sends a join refused
// UNAVAILABLE again, and the store's UNAVAILABLE may come after its commit was made) is
// answered again as its join was, a certificate for that key at the identity epoch its
// join got, while the token lives and that epoch holds; refused token-used otherwise, and
// only logged (resent).
func (s *Service) Join(ctx context.Context, from string, req joinwire.Request) (joinwire.Response, error) {
	p, token, err := s.open(req)
	if err != nil {
		return joinwire.Response{}, err
	}
	var resp joinwire.Response
	var tok store.JoinToken
	var again bool
	err = s.store.Update(func(tx *store.Tx) error {
		tok, err = tx.ConsumeJoinToken(token, from)
		if again = sentAgain(tok, err, p.SPKI); err != nil && !again {
			return err
		}
		used := err
		resp, err = s.issue(tx, p, tok, again)
		if again && err != nil && (proto.CodeOf(err) == proto.Forbidden || proto.CodeOf(err) == proto.NotFound) {
			// The join's own request sent again is answered as its join was, or refused
			// as the used token it carries: whoever sent it learns nothing more.
			return used
		}
		return err
	})
	if err != nil {
		s.log.Warn("join refused", "node", p.NodeID, "role", p.Role, "token", tok.ID, "err", err)
		if proto.AsError(err).Details.Reason == proto.ReasonTokenUsed && tok.ID != "" {
			s.reused(ctx, tok, from, again)
		}
		return joinwire.Response{}, err
	}
	if again {
		s.log.Warn("a join's request was sent again and answered again", "node", p.NodeID, "role", p.Role, "token", tok.ID,
			"from", from, "joinFrom", tok.UsedFrom, "usedAt", tok.UsedAt,
			"todo", "nothing: the certificate is for the key its join certified, which only the agent that joined holds")
		return resp, nil
	}
	s.log.Info("agent joined", "node", p.NodeID, "role", p.Role, "site", tok.Site, "token", tok.ID)
	return resp, nil
}

// issue checks, in tx, that the token tok a join consumed admits the join p (its kind
// joins p's role, it was minted for p's node, its site exists, and, minted by a
// workflow run for a ramdisk, the certificate it would mint is taken: FORBIDDEN
// run-ended at sealedToken once that run ended, store.Tx.CheckAgent) and answers it: a
// JoinResponse with a certificate for p's key at the identity epoch of p's node, recorded
// on the token, that for a ramdisk names the workflow run that minted tok (credential).
// again, for the token's join's own request sent again (sentAgain), it answers only at
// the epoch that join got, while the token lives, recording nothing.
func (s *Service) issue(tx *store.Tx, p joinwire.Parsed, tok store.JoinToken, again bool) (joinwire.Response, error) {
	if role := RoleOf(tok.Kind); role != p.Role {
		return joinwire.Response{}, proto.Errorf(proto.Forbidden, "join token %s is a %s token, which joins role %s, not %s", tok.ID, tok.Kind, role, p.Role).WithReason(proto.ReasonRole)
	}
	if tok.NodeID != p.NodeID {
		return joinwire.Response{}, proto.Errorf(proto.Forbidden, "join token %s was minted for node %q; refusing to admit it as %q", tok.ID, tok.NodeID, p.NodeID).WithReason(proto.ReasonIdentity)
	}
	if tok.Kind == store.TokenSite && tok.NodeID != tok.Site {
		// A token minted before its node id had to be its site's: the registry finds,
		// and revokes, a site's agent by the site's name.
		return joinwire.Response{}, proto.Errorf(proto.Forbidden, "join token %s admits %q as the agent of site %q: a site's agent is the site (mint a site token without --node-id)", tok.ID, tok.NodeID, tok.Site).WithReason(proto.ReasonIdentity)
	}
	epoch, err := tx.AgentEpoch(p.NodeID, proto.Role(p.Role))
	if err != nil {
		return joinwire.Response{}, err
	}
	if again {
		if *tok.UsedEpoch != epoch || tok.Expired(tx.Now()) {
			return joinwire.Response{}, proto.Errorf(proto.Forbidden, "join token %s's join was at identity epoch %d, or its token expired", tok.ID, *tok.UsedEpoch)
		}
	} else if tok, err = tx.JoinedAt(tok, epoch, joinwire.KeyDigest(p.SPKI)); err != nil {
		return joinwire.Response{}, err
	}
	if tok.Site != "" {
		// A token minted before sites were checked at minting may name none.
		if _, err := tx.Site(tok.Site); err != nil {
			return joinwire.Response{}, siteNotFound(err, tok.Site)
		}
	}
	c := credential(p, tok, epoch)
	if c.Run != "" {
		// A ramdisk token a workflow run minted admits the ramdisk of that run alone: once
		// it ended, the certificate it would mint is refused at its first hello.
		if err := tx.CheckAgent(c); err != nil {
			return joinwire.Response{}, proto.AsError(err).WithPath("sealedToken")
		}
	}
	der, err := s.keys.IssueAgentCertificate(c, p.PublicKey)
	if err != nil {
		return joinwire.Response{}, err
	}
	return joinwire.SignResponse(s.keys.JoinSigner(), joinwire.Payload{
		NodeID:         p.NodeID,
		Role:           p.Role,
		Site:           tok.Site,
		Certificate:    string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		AgentCA:        string(s.keys.AgentCAPEM),
		AgentEndpoint:  s.agentEndpoint,
		AgentEndpoints: s.agentEndpoints,
	})
}

// credential is what the certificate a join p with token tok gets at epoch names: p's
// node and role, the epoch and, for a ramdisk, the workflow run that minted tok
// (store.JoinToken.Workflow), whose end ends the certificate (store.Tx.CheckAgent).
func credential(p joinwire.Parsed, tok store.JoinToken, epoch int64) proto.AgentCredential {
	c := proto.AgentCredential{Node: p.NodeID, Role: proto.Role(p.Role), Epoch: epoch}
	if c.Role == proto.RoleRamdisk {
		c.Run = tok.Workflow
	}
	return c
}

// sentAgain reports whether a join whose token was consumed with err comes beside the
// key, spki, that the token's join certified: that join's own request sent again, since
// the sealed token opens only beside its key.
func sentAgain(tok store.JoinToken, err error, spki []byte) bool {
	return err != nil && proto.AsError(err).Details.Reason == proto.ReasonTokenUsed && tok.UsedEpoch != nil &&
		tok.UsedKey != "" && tok.UsedKey == joinwire.KeyDigest(spki)
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

// reused tells on tok, used already, presented again from from: a WARN that names both
// addresses, the count by kind and address, and the Reuses (the node's event log). A
// token works once, so whoever presents it again is the agent its join admitted, started
// again without its join (a machine rebooted into the same boot entry, an agent
// restarted before it kept its join), or someone else who read the token. When again,
// beside the key its join certified (sentAgain), it is that join's request sent again,
// which whoever saw the request can send without the token's secret, and which gets
// nothing but for the agent holding that key: it is only logged (resent), never told as
// the token presented again, which would cut that agent off.
func (s *Service) reused(ctx context.Context, tok store.JoinToken, from string, again bool) {
	if again {
		s.resent(tok, from)
		return
	}
	address := tok.ReusedFrom(from)
	if s.observer != nil {
		s.observer.JoinTokenReused(tok.Kind, address)
	}
	s.log.Warn("a used join token was presented again", "node", tok.NodeID, "kind", tok.Kind, "token", tok.ID,
		"from", from, "joinFrom", tok.UsedFrom, "usedAt", tok.UsedAt, "address", address,
		"todo", "from another address, another host may hold the token: the node's events (nodes events) say what the registry did and what to do")
	if s.reuses == nil {
		return
	}
	if err := s.reuses.TokenReused(ctx, tok, from); err != nil {
		s.log.Error("recording a used join token presented again", "node", tok.NodeID, "kind", tok.Kind, "token", tok.ID, "from", from, "err", err)
	}
}

// resent logs the request of tok's join sent again from from, and refused (the token
// expired, or the node's identity epoch moved since the join): by the agent it admitted
// (its bcd join sent again), or by whoever saw the request. It holds the token sealed for
// the key the join certified, and no secret: a certificate for that key serves only the
// agent holding its private key, so it tells nothing of who holds the token.
func (s *Service) resent(tok store.JoinToken, from string) {
	s.log.Warn("a join's request was sent again", "node", tok.NodeID, "kind", tok.Kind, "token", tok.ID,
		"from", from, "joinFrom", tok.UsedFrom, "usedAt", tok.UsedAt,
		"todo", "nothing for the node: its agent keeps its identity; from another address than joinFrom, someone saw the join's request (its body) on its way")
}
