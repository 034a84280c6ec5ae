package join

import (
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/joinwire"
	"github.com/better-compute/better-compute/registry/pki"
	"github.com/better-compute/better-compute/registry/store"
)

// Renew issues the connected agent of node in role, whose certificate names the identity
// epoch epoch, a certificate (DER) for its new key spki (a SubjectPublicKeyInfo, DER) of
// the same epoch, as its join did, so that it can keep connecting past its
// certificate's expiry. A key of another type than the join accepts is INVALID_INPUT; a
// node whose identity is revoked, or a certificate of an earlier installation
// (store.Tx.CheckAgent), is FORBIDDEN.
func Renew(st *store.Store, keys *pki.PKI, node string, role proto.Role, epoch int64, spki []byte) ([]byte, error) {
	pub, err := joinwire.ParseAgentKey(spki)
	if err != nil {
		return nil, proto.Errorf(proto.InvalidInput, "renewal key: %v", err).WithPath("renewRequest.publicKey")
	}
	if err := st.View(func(tx *store.Tx) error { return tx.CheckAgent(node, role, epoch) }); err != nil {
		return nil, err
	}
	return keys.IssueAgentCertificate(node, string(role), epoch, pub)
}
