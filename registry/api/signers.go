package api

import (
	"context"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/image"
	"github.com/better-compute/better-compute/registry/store"
)

// AddSignerRequest is the body of signers.add.
type AddSignerRequest struct {
	TenantID string `json:"tenantId"`
	ID       string `json:"id"`
	// PublicKey is the signer's SPKI PEM (Ed25519 or ECDSA P-256).
	PublicKey string `json:"publicKey"`
}

// SignerRequest names one signer: the body of signers.revoke.
type SignerRequest struct {
	TenantID string `json:"tenantId"`
	ID       string `json:"id"`
}

// ListSignersRequest is the body of signers.list; no tenantId lists every tenant's.
type ListSignersRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	ListRequest
}

// SignerList is the answer of signers.list.
type SignerList struct {
	Signers    []ImageSigner `json:"signers"`
	NextCursor string        `json:"nextCursor,omitempty"`
}

// registerSigners adds the host-only signers.add, signers.revoke and signers.list:
// the allowlists decide which images every tenant trusts, so nothing on the network
// may change them.
func (s *Server) registerSigners() {
	HandleHost(s, "signers.add", func(_ context.Context, c *Caller, req AddSignerRequest) (out ImageSigner, err error) {
		err = c.update(func(tx *store.Tx) error {
			tenant, err := signerTenant(tx, c, req.TenantID)
			if err != nil {
				return err
			}
			signer, err := image.AddSigner(tx, tenant, req.ID, []byte(req.PublicKey))
			out = signerOf(signer)
			return err
		})
		return out, err
	})
	HandleHost(s, "signers.revoke", func(_ context.Context, c *Caller, req SignerRequest) (out ImageSigner, err error) {
		err = c.update(func(tx *store.Tx) error {
			tenant, err := signerTenant(tx, c, req.TenantID)
			if err != nil {
				return err
			}
			signer, err := tx.RevokeImageSigner(tenant, req.ID)
			out = signerOf(signer)
			return notFoundAt(err, "id")
		})
		return out, err
	})
	HandleHost(s, "signers.list", func(_ context.Context, c *Caller, req ListSignersRequest) (out SignerList, err error) {
		out.Signers, out.NextCursor, err = listPage(c, req.ListRequest, func(tx *store.Tx, page store.Page) ([]ImageSigner, string, error) {
			tenant := ""
			if req.TenantID != "" {
				var err error
				if tenant, err = c.TenantFor(tx, req.TenantID); err != nil {
					return nil, "", err
				}
			}
			signers, next, err := tx.ImageSigners(tenant, page)
			return viewsOf(signers, signerOf), next, err
		})
		return out, err
	})
}

// signerTenant is the tenant whose allowlist a change names. It must be given: the
// platform's (root) allowlist is changed only when asked for by name.
func signerTenant(tx *store.Tx, c *Caller, requested string) (string, error) {
	if requested == "" {
		return "", proto.Errorf(proto.InvalidInput, "name the tenant whose allowlist changes (root for a platform signer)").WithPath("tenantId")
	}
	return c.TenantFor(tx, requested)
}
