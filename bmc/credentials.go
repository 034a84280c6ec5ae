package bmc

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
)

// CredentialRef names a BMC credential without holding it, so that NodeSpecs, bindings
// and logs carry only the name: secret://NAME, a secret of the registry's secret store,
// which the registry resolves for the machine's tenant and sends with the command that
// uses it. The site never resolves a reference itself.
type CredentialRef string

// Check refuses a reference that is not secret://NAME, or one that seems to hold a secret
// itself. The reference is not echoed: it may be a secret written where its name belongs.
func (r CredentialRef) Check() error {
	if !hostunit.IsSecretRef(string(r)) {
		return proto.Errorf(proto.InvalidConfig, "credential reference: %s; name the secret, never write the secret itself", hostunit.SecretRefRule).WithPath("credentialRef")
	}
	return nil
}

// Credential is a resolved BMC login. Its password never leaves through fmt, slog or
// encoding/json: each of them sees it redacted.
type Credential struct {
	Username string
	password string
}

// NewCredential makes a credential.
func NewCredential(username, password string) Credential {
	return Credential{Username: username, password: password}
}

// Password returns the password, for the one call that logs in with it.
func (c Credential) Password() string { return c.password }

const redacted = "[redacted]"

// String shows the user name only.
func (c Credential) String() string { return c.Username + ":" + redacted }

// GoString shows the user name only, for %#v.
func (c Credential) GoString() string {
	return "bmc.Credential{Username:" + c.Username + ", password:" + redacted + "}"
}

// LogValue shows the user name only.
func (c Credential) LogValue() slog.Value {
	return slog.GroupValue(slog.String("username", c.Username), slog.String("password", redacted))
}

// MarshalJSON shows the user name only.
func (c Credential) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]string{"username": c.Username, "password": redacted})
}

// Credentials resolves references into credentials.
type Credentials interface {
	Resolve(ctx context.Context, ref CredentialRef) (Credential, error)
}

// Attached is the Credentials of one command: the credential the registry sent with it,
// for the reference it was resolved from and no other. Nothing is read from disk.
type Attached struct {
	Ref        CredentialRef
	Credential Credential
}

// Resolve returns the attached credential when ref is the one it was resolved from.
func (a Attached) Resolve(_ context.Context, ref CredentialRef) (Credential, error) {
	if err := ref.Check(); err != nil {
		return Credential{}, err
	}
	if a.Ref != ref || a.Credential.Username == "" {
		return Credential{}, proto.Errorf(proto.InvalidConfig, "the command carries no credential for %s: the registry sends the BMC's credential with each command that uses it", string(ref)).WithPath("credentialRef")
	}
	return a.Credential, nil
}
