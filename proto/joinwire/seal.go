package joinwire

import (
	"crypto/ecdh"
	"crypto/hpke"
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// Info is the HPKE info string of the join: it separates join tokens from anything else
// ever sealed to the same key.
const Info = "bc-join-v1"

// The HPKE suite: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM, base mode.
var (
	kdf  = hpke.HKDFSHA256()
	aead = hpke.AES128GCM()
)

// encLen is the size of an X25519 encapsulated key.
const encLen = 32

// AAD is the additional data a join token is sealed with: it binds the token to the
// identity the agent claims and the key it asks to have certified, so a sealed token
// lifted from one request opens for no other. It is the text
//
//	bc-join-v1\n<node id>\n<role>\n<hex SHA-256 of the agent key's SPKI DER>\n
//
// (node ids and roles never hold a newline).
func AAD(nodeID, role string, spki []byte) []byte {
	return []byte(Info + "\n" + nodeID + "\n" + role + "\n" + KeyDigest(spki) + "\n")
}

// KeyDigest is the lower-case hex SHA-256 of an agent key's SubjectPublicKeyInfo DER, as
// the AAD binds it: a sealed token opens only beside the key of this digest.
func KeyDigest(spki []byte) string {
	sum := sha256.Sum256(spki)
	return hex.EncodeToString(sum[:])
}

// SealToken seals a join token to the JoinService key: the encapsulated key followed by
// the ciphertext.
func SealToken(to *ecdh.PublicKey, aad []byte, token string) ([]byte, error) {
	pk, err := hpke.NewDHKEMPublicKey(to)
	if err != nil {
		return nil, err
	}
	enc, sender, err := hpke.NewSender(pk, kdf, aead, []byte(Info))
	if err != nil {
		return nil, err
	}
	ct, err := sender.Seal(aad, []byte(token))
	if err != nil {
		return nil, err
	}
	return append(enc, ct...), nil
}

// ErrUnsealed is returned by OpenToken for anything that does not open: another key,
// another AAD, a tampered or truncated ciphertext.
var ErrUnsealed = errors.New("the sealed token does not open with this key and identity")

// OpenToken opens a token sealed by SealToken.
func OpenToken(k ecdh.KeyExchanger, aad, sealed []byte) (string, error) {
	if len(sealed) <= encLen {
		return "", ErrUnsealed
	}
	sk, err := hpke.NewDHKEMPrivateKey(k)
	if err != nil {
		return "", err
	}
	r, err := hpke.NewRecipient(sealed[:encLen], sk, kdf, aead, []byte(Info))
	if err != nil {
		return "", ErrUnsealed
	}
	pt, err := r.Open(aad, sealed[encLen:])
	if err != nil {
		return "", ErrUnsealed
	}
	return string(pt), nil
}
