package site

import (
	"context"
	"path/filepath"

	"github.com/better-compute/better-compute/bmc"
	"github.com/better-compute/better-compute/proto"
)

// credentials resolves BMC credential references on the site: secret://NAME from the
// file NAME of the secrets directory, file references as they are.
type credentials struct {
	secretsDir string
}

func (c credentials) Resolve(ctx context.Context, ref bmc.CredentialRef) (bmc.Credential, error) {
	if err := ref.Check(); err != nil {
		return bmc.Credential{}, err
	}
	if name, ok := ref.Secret(); ok {
		if c.secretsDir == "" {
			return bmc.Credential{}, proto.Errorf(proto.InvalidConfig, "credential reference secret://%s: this site has no bmc.secretsDir to resolve it in", name).WithPath("credentialRef")
		}
		if !filepath.IsLocal(name) {
			return bmc.Credential{}, proto.Errorf(proto.InvalidConfig, "credential reference secret://%s: a secret's name is a path inside the secrets directory", name).WithPath("credentialRef")
		}
		ref = bmc.CredentialRef(filepath.Join(c.secretsDir, name))
	}
	return bmc.FileCredentials{}.Resolve(ctx, ref)
}
