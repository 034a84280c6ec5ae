package proto

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"testing"
)

func TestKeyAlgorithm(t *testing.T) {
	rk, _ := rsa.GenerateKey(rand.Reader, 1024)
	ek, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	xk, _ := ecdh.X25519().GenerateKey(rand.Reader)
	for want, key := range map[string]any{"RSA": &rk.PublicKey, "ECDSA P-384": &ek.PublicKey, "Ed25519": edPub, "X25519": xk.PublicKey(), "unrecognised": "a string"} {
		if got := KeyAlgorithm(key); got != want {
			t.Errorf("KeyAlgorithm(%T) = %q, want %q", key, got, want)
		}
	}
}
