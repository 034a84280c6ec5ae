package api

import (
	"context"
	"slices"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/join"
	"github.com/better-compute/better-compute/registry/store"
)

// CreateTokenRequest is the body of tokens.create.
type CreateTokenRequest struct {
	// Kind is provisioned, ramdisk or site.
	Kind string `json:"kind"`
	// NodeID is the node the token admits; a site token defaults it to the site.
	NodeID string `json:"nodeId,omitempty"`
	// Site is the site; required for a site token.
	Site string `json:"site,omitempty"`
	// TTLSeconds is the token's lifetime; 0 takes the kind's default.
	TTLSeconds int64 `json:"ttlSeconds,omitempty"`
}

// TokenKinds are the kinds of join token tokens.create mints, as its kind names them.
func TokenKinds() []string { return slices.Clone(store.TokenKinds) }

// Token is a join token as the API shows it: never its secret or the secret's hash.
type Token struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	NodeID    string    `json:"nodeId"`
	Site      string    `json:"site,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	UsedAt    time.Time `json:"usedAt,omitzero"`
	// UsedFrom is the source address of the join that used the token: the token
	// presented again from another address tells on the node (nodes events).
	UsedFrom string `json:"usedFrom,omitempty"`
	// Workflow is the workflow that minted the token, the one its reuse from another
	// address fails; absent for a token an operator minted.
	Workflow string `json:"workflow,omitempty"`
}

func tokenView(t store.JoinToken) Token {
	return Token{ID: t.ID, Kind: t.Kind, NodeID: t.NodeID, Site: t.Site, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, UsedAt: t.UsedAt, UsedFrom: t.UsedFrom,
		Workflow: t.Workflow}
}

// CreatedToken is the answer of tokens.create: the only time the secret is shown.
type CreatedToken struct {
	Token
	Secret string `json:"token"`
}

// TokenList is the answer of tokens.list.
type TokenList struct {
	Tokens     []Token `json:"tokens"`
	NextCursor string  `json:"nextCursor,omitempty"`
}

// RevokeTokenRequest is the body of tokens.revoke.
type RevokeTokenRequest struct {
	ID string `json:"id"`
}

// registerTokens adds tokens.create, tokens.list and tokens.revoke. Join tokens admit agents to the
// platform, so only the root tenant's credentials handle them.
func (s *Server) registerTokens() {
	rootOnly := func(c *Caller, method string) error {
		if c.Tenant != store.RootTenant {
			return proto.Errorf(proto.Forbidden, "only the root tenant's credentials %s join tokens", method)
		}
		return nil
	}
	Handle(s, "tokens.create", ActionTokensManage, func(_ context.Context, c *Caller, req CreateTokenRequest) (out CreatedToken, err error) {
		if err := rootOnly(c, "create"); err != nil {
			return out, err
		}
		if req.TTLSeconds < 0 || req.TTLSeconds > int64(join.MaxTTL/time.Second) {
			return out, proto.Errorf(proto.InvalidInput, "ttlSeconds must be 1 to %d", int64(join.MaxTTL/time.Second)).WithPath("ttlSeconds")
		}
		err = c.update(func(tx *store.Tx) error {
			tok, secret, err := join.MintToken(tx, store.TokenFor{Kind: req.Kind, NodeID: req.NodeID, Site: req.Site}, time.Duration(req.TTLSeconds)*time.Second)
			out = CreatedToken{Token: tokenView(tok), Secret: secret}
			return err
		})
		return out, err
	})
	Handle(s, "tokens.revoke", ActionTokensManage, func(_ context.Context, c *Caller, req RevokeTokenRequest) (out Token, err error) {
		if err := rootOnly(c, "revoke"); err != nil {
			return out, err
		}
		err = c.update(func(tx *store.Tx) error {
			tok, err := tx.RevokeJoinToken(req.ID)
			out = tokenView(tok)
			return err
		})
		return out, err
	})
	Handle(s, "tokens.list", ActionTokensManage, func(_ context.Context, c *Caller, req ListRequest) (out TokenList, err error) {
		if err := rootOnly(c, "list"); err != nil {
			return out, err
		}
		out.Tokens, out.NextCursor, err = listPage(c, req, func(tx *store.Tx, page store.Page) ([]Token, string, error) {
			toks, next, err := tx.JoinTokens(page)
			return viewsOf(toks, tokenView), next, err
		})
		return out, err
	})
}
