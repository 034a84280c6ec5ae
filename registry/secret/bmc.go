package secret

import (
	"strings"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// platformPrefix starts a BMC credential reference to a secret of the root tenant, the
// platform's: secret://platform/NAME names the root tenant's secret://NAME.
const platformPrefix = "secret://platform/"

// PlatformRef returns the root tenant's reference a platform reference
// (secret://platform/NAME) stands for, secret://NAME, and whether ref is one.
func PlatformRef(ref string) (string, bool) {
	name, ok := strings.CutPrefix(ref, platformPrefix)
	return "secret://" + name, ok
}

// ForBMC returns the credential of node's BMC, for the site agent to log in with for one
// command. The node's credential reference resolves in the node's own tenant's secrets;
// a platform reference (secret://platform/NAME) in the root tenant's, and only for a
// node whose BMC a root-tenant credential bound (store.Node.PlatformBMC). The secret's
// value is one JSON object {"username", "password"}. A node without a credential
// reference gets nil.
func (b *Box) ForBMC(tx *store.Tx, n store.Node) (*proto.BMCCredential, error) {
	ref := n.BMC.CredentialRef
	if ref == "" {
		return nil, nil
	}
	tenant, name := n.Tenant, ref
	if root, ok := PlatformRef(ref); ok {
		if !n.PlatformBMC {
			return nil, proto.Errorf(proto.Forbidden, "node %s names the platform's credential %s, which the platform did not bind to it", n.ID, ref).
				WithReason(proto.ReasonPlatformCredential)
		}
		tenant, name = store.RootTenant, root
	}
	value, err := b.GetTenant(tx, tenant, name)
	if err != nil {
		return nil, err
	}
	var login struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if err := (jsondoc.Decoder{}).Decode(value, &login); err != nil || login.Username == "" {
		// Neither the value nor the decoder's message is quoted: it is the secret.
		return nil, proto.Errorf(proto.InvalidConfig, "the secret %s of tenant %s is not one JSON object {\"username\", \"password\"} with a user name: put it again with `better-compute secrets put`", name, tenant)
	}
	return &proto.BMCCredential{Ref: ref, Username: login.Username, Password: login.Password}, nil
}
