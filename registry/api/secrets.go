package api

import (
	"context"
	"time"

	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
)

// MaxSecretValue bounds a secret's value: a bootstrap token or a credential, not a file.
const MaxSecretValue = secret.MaxValue

// PutSecretRequest is the body of secrets.put: the tenant's secret ref and its value
// (base64 in JSON), at most MaxSecretValue bytes.
type PutSecretRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	Ref      string `json:"ref"`
	Value    []byte `json:"value"`
}

// SecretRequest names one secret of a tenant: the body of secrets.delete.
type SecretRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	Ref      string `json:"ref"`
}

// ListSecretsRequest is the body of secrets.list.
type ListSecretsRequest struct {
	TenantID string `json:"tenantId,omitempty"`
	ListRequest
}

// Secret is a tenant's secret as the API shows it: never its value.
type Secret struct {
	TenantID  string    `json:"tenantId"`
	Ref       string    `json:"ref"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

func secretView(s store.Secret) Secret {
	return Secret{TenantID: s.Tenant, Ref: s.Ref, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// PutSecret is the answer of secrets.put.
type PutSecret struct {
	Secret
	// Replaced is true when the secret had a value, which the new one replaced.
	Replaced bool `json:"replaced"`
}

// SecretList is the answer of secrets.list.
type SecretList struct {
	Secrets    []Secret `json:"secrets"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

// DeletedSecret is the answer of secrets.delete.
type DeletedSecret struct {
	TenantID string `json:"tenantId"`
	Ref      string `json:"ref"`
}

// RegisterSecrets adds secrets.put, secrets.list and secrets.delete, which need
// compute:secrets:manage: the secrets a tenant keeps in the registry for its nodes (a
// k8s-join's bootstrap token), sealed in box. No method returns a value: only the node
// agents whose NodeSpec names a secret get it, over the agent plane.
func (s *Server) RegisterSecrets(box *secret.Box) {
	Handle(s, "secrets.put", ActionSecretsManage, func(_ context.Context, c *Caller, req PutSecretRequest) (out PutSecret, err error) {
		err = inTenant(s.store.Update, c, req.TenantID, func(tx *store.Tx, tenant string) error {
			sec, replaced, err := box.PutTenant(tx, tenant, req.Ref, req.Value)
			out = PutSecret{Secret: secretView(sec), Replaced: replaced}
			return err
		})
		return out, err
	})
	Handle(s, "secrets.list", ActionSecretsManage, func(_ context.Context, c *Caller, req ListSecretsRequest) (out SecretList, err error) {
		out.Secrets, out.NextCursor, err = tenantPage(c, req.TenantID, req.ListRequest, func(tx *store.Tx, tenant string, page store.Page) ([]Secret, string, error) {
			secs, next, err := tx.TenantSecrets(tenant, page)
			var views []Secret
			for _, sec := range secs {
				views = append(views, secretView(sec))
			}
			return views, next, err
		})
		return out, err
	})
	Handle(s, "secrets.delete", ActionSecretsManage, func(_ context.Context, c *Caller, req SecretRequest) (out DeletedSecret, err error) {
		if err := secret.CheckRef(req.Ref); err != nil {
			return out, err
		}
		err = inTenant(s.store.Update, c, req.TenantID, func(tx *store.Tx, tenant string) error {
			out = DeletedSecret{TenantID: tenant, Ref: req.Ref}
			return tx.DeleteTenantSecret(tenant, req.Ref)
		})
		return out, err
	})
}
