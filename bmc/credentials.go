package bmc

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// CredentialRef names a BMC credential without holding it, so that NodeSpecs, bindings
// and logs carry only the name: secret://NAME (the registry's secret store, resolved by
// the site) or the absolute path of a credential file, as /PATH or file:///PATH.
type CredentialRef string

// Check refuses a reference of neither form, or one that seems to hold a secret itself.
func (r CredentialRef) Check() error {
	if name, ok := strings.CutPrefix(string(r), "secret://"); ok {
		if name == "" || strings.ContainsAny(name, "@:? \t\r\n") {
			// The value is not echoed: it may be a secret put where its name belongs.
			return proto.Errorf(proto.InvalidConfig, "credential reference secret://...: the name is empty or holds '@', ':', '?' or spaces; name the secret, never write the secret itself").WithPath("credentialRef")
		}
		return nil
	}
	if path, ok := r.File(); ok && filepath.IsAbs(path) && filepath.Clean(path) == path {
		return nil
	}
	return proto.Errorf(proto.InvalidConfig, "credential reference %q is neither secret://NAME nor an absolute file path", string(r)).WithPath("credentialRef")
}

// Secret returns the secret's name of a secret://NAME reference.
func (r CredentialRef) Secret() (string, bool) {
	return strings.CutPrefix(string(r), "secret://")
}

// File returns the path of a file reference (/PATH or file:///PATH).
func (r CredentialRef) File() (string, bool) {
	if p, ok := strings.CutPrefix(string(r), "file://"); ok {
		return p, strings.HasPrefix(p, "/")
	}
	return string(r), strings.HasPrefix(string(r), "/")
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

// Credentials resolves references into credentials. The site provides it: secret://
// references through the registry's secret store, file references with FileCredentials.
type Credentials interface {
	Resolve(ctx context.Context, ref CredentialRef) (Credential, error)
}

// FileCredentials resolves file references. The file holds one JSON object,
// {"username": "...", "password": "..."}, and must be readable by its owner only.
type FileCredentials struct{}

// Resolve reads the credential file ref names.
func (FileCredentials) Resolve(_ context.Context, ref CredentialRef) (Credential, error) {
	if err := ref.Check(); err != nil {
		return Credential{}, err
	}
	path, ok := ref.File()
	if !ok {
		return Credential{}, proto.Errorf(proto.InvalidConfig, "credential reference %s is not a file: the site's secret store resolves it", string(ref)).WithPath("credentialRef")
	}
	info, err := os.Stat(path)
	if err != nil {
		return Credential{}, proto.Errorf(proto.InvalidConfig, "credential file: %v", err).WithPath("credentialRef")
	}
	if info.Mode().Perm()&0o077 != 0 {
		return Credential{}, proto.Errorf(proto.InvalidConfig, "credential file %s is readable by others (mode %04o): chmod 600 it", path, info.Mode().Perm()).WithPath("credentialRef")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Credential{}, proto.Errorf(proto.InvalidConfig, "credential file: %v", err).WithPath("credentialRef")
	}
	var f struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil || f.Username == "" || dec.More() {
		return Credential{}, proto.Errorf(proto.InvalidConfig, "credential file %s is not one JSON object {\"username\", \"password\"} with a user name", path).WithPath("credentialRef")
	}
	return NewCredential(f.Username, f.Password), nil
}
