package joinwire

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"fmt"

	"github.com/better-compute/better-compute/proto"
)

// JoinMethod is the API method of the join: POST /v1/join.join, without a bearer
// credential (the sealed token authenticates it).
const JoinMethod = "join.join"

// The roles an agent joins as, as the join request spells them: proto's roles (each is
// the OrganizationalUnit of the agent's certificate).
const (
	RoleSite    = string(proto.RoleSite)
	RoleRamdisk = string(proto.RoleRamdisk)
	RoleNode    = string(proto.RoleNode)
)

// Limits on what a join request carries.
const (
	maxPublicKey   = 1024
	maxSealedToken = 1024
	// MaxRequest bounds the body of join.join, which anyone may send. The largest request
	// Parse could accept (a 128-byte node id and both base64 fields at their limits) is
	// under 3 KiB; a real one, with a P-256 key and a sealed token, is under 600 bytes.
	MaxRequest = 4 << 10
)

// CheckRole refuses an unknown role.
func CheckRole(role string) error {
	if !proto.Role(role).Valid() {
		return fmt.Errorf("role %s: the roles are %v", proto.Quote(role), proto.Roles)
	}
	return nil
}

// Request is the body of join.join.
type Request struct {
	// NodeID is the node the agent claims to be; the token must have been minted for it.
	NodeID string `json:"nodeId"`
	// Role is site, ramdisk or node; the token's kind must join as it.
	Role string `json:"role"`
	// PublicKey is the standard base64 of the SubjectPublicKeyInfo DER of the agent's key
	// (ECDSA P-256 or Ed25519), which its certificate will certify.
	PublicKey string `json:"publicKey"`
	// SealedToken is the standard base64 of the HPKE encapsulated key followed by the
	// ciphertext of the join token (see SealToken).
	SealedToken string `json:"sealedToken"`
}

// Parsed is a join request whose fields are well formed.
type Parsed struct {
	NodeID    string
	Role      string
	PublicKey crypto.PublicKey
	// SPKI is the agent key's SubjectPublicKeyInfo DER, as bound in the AAD.
	SPKI   []byte
	Sealed []byte
}

// Parse checks the request's fields, with INVALID_INPUT naming the first bad one.
func (r Request) Parse() (Parsed, error) {
	if err := proto.CheckNodeID(r.NodeID); err != nil {
		return Parsed{}, proto.AsError(err).WithPath("nodeId")
	}
	if err := CheckRole(r.Role); err != nil {
		return Parsed{}, proto.Errorf(proto.InvalidInput, "%v", err).WithPath("role")
	}
	spki, err := base64.StdEncoding.DecodeString(r.PublicKey)
	if err != nil || len(spki) == 0 || len(spki) > maxPublicKey {
		return Parsed{}, proto.Errorf(proto.InvalidInput, "publicKey must be the base64 of a SubjectPublicKeyInfo of at most %d bytes", maxPublicKey).WithPath("publicKey")
	}
	pub, err := ParseAgentKey(spki)
	if err != nil {
		return Parsed{}, proto.Errorf(proto.InvalidInput, "publicKey: %v", err).WithPath("publicKey")
	}
	sealed, err := base64.StdEncoding.DecodeString(r.SealedToken)
	if err != nil || len(sealed) == 0 || len(sealed) > maxSealedToken {
		return Parsed{}, proto.Errorf(proto.InvalidInput, "sealedToken must be the base64 of at most %d bytes", maxSealedToken).WithPath("sealedToken")
	}
	return Parsed{NodeID: r.NodeID, Role: r.Role, PublicKey: pub, SPKI: spki, Sealed: sealed}, nil
}

// ParseAgentKey parses a SubjectPublicKeyInfo (DER) of a key type an agent certificate
// may certify: ECDSA P-256 or Ed25519.
func ParseAgentKey(spki []byte) (crypto.PublicKey, error) {
	pub, err := x509.ParsePKIXPublicKey(spki)
	if err != nil {
		return nil, err
	}
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return pub, nil
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return pub, nil
		}
	}
	return nil, fmt.Errorf("an %s key; agents use ECDSA P-256 or Ed25519", proto.KeyAlgorithm(pub))
}
