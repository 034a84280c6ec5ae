package proto

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"fmt"
)

// KeyAlgorithm names a key's algorithm in the words an operator knows ("RSA", "ECDSA
// P-384", "Ed25519", "X25519"), for messages that refuse a key: never a Go type name.
func KeyAlgorithm(key any) string {
	switch k := key.(type) {
	case *rsa.PublicKey, *rsa.PrivateKey:
		return "RSA"
	case ed25519.PublicKey, ed25519.PrivateKey:
		return "Ed25519"
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name
	case *ecdsa.PrivateKey:
		return "ECDSA " + k.Curve.Params().Name
	case *ecdh.PublicKey:
		return fmt.Sprint(k.Curve())
	case *ecdh.PrivateKey:
		return fmt.Sprint(k.Curve())
	}
	return "unrecognised"
}
