package join

import (
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/store"
)

// Renew issues the connected agent whose certificate names c a certificate (DER) for its
// new key spki (a SubjectPublicKeyInfo, DER) that names the same, as its join did (its
// identity epoch and, for a ramdisk, its workflow run), so that it can keep connecting
// past its certificate's expiry. A key of another type than the join accepts is
// INVALID_INPUT; a node whose identity is revoked, a certificate of an earlier
// installation, or a ramdisk's whose workflow ended (store.Tx.CheckAgent), is FORBIDDEN.
func Renew(st *store.Store, keys *pki.PKI, c proto.AgentCredential, spki []byte) ([]byte, error) {
	pub, err := joinwire.ParseAgentKey(spki)
	if err != nil {
		return nil, proto.Errorf(proto.InvalidInput, "renewal key: %v", err).WithPath("renewRequest.publicKey")
	}
	if err := st.View(func(tx *store.Tx) error { return tx.CheckAgent(c) }); err != nil {
		return nil, err
	}
	return keys.IssueAgentCertificate(c, pub)
}
