// Package seal is the registry's AES-256-GCM sealing, written once: a 32-byte key, a
// random nonce written before each ciphertext, and additional data binding a
// ciphertext to what it is and where it is kept, so it opens nowhere else.
// registry/pki seals the registry's keys with the key-encryption key, registry/secret
// the secrets with the secrets key. It imports nothing of the project.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// KeySize is the length of a key: AES-256.
const KeySize = 32

// ErrShort is a sealed value shorter than its nonce: cut short, or not a sealed value.
var ErrShort = errors.New("the sealed value is shorter than its nonce")

// Key seals and opens values under one key.
type Key struct {
	aead cipher.AEAD
}

// NewKey makes a new random key.
func NewKey() []byte {
	key := make([]byte, KeySize)
	rand.Read(key)
	return key
}

// ID names key without revealing it: 16 hex digits of a SHA-256 of what the key is
// (purpose) and the key, for a record to say which key sealed what it holds.
func ID(purpose string, key []byte) string {
	sum := sha256.Sum256(append([]byte(purpose+"\x00"), key...))
	return hex.EncodeToString(sum[:8])
}

// New makes a Key of key, which must be KeySize bytes.
func New(key []byte) (*Key, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("%d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Key{aead: aead}, nil
}

// Seal returns plain sealed under k and bound to ad: a new random nonce, then the
// ciphertext and its tag.
func (k *Key) Seal(plain, ad []byte) []byte {
	nonce := make([]byte, k.aead.NonceSize())
	rand.Read(nonce)
	return k.aead.Seal(nonce, nonce, plain, ad)
}

// Open returns the plaintext of what Seal made with k and ad: ErrShort for a value too
// short to hold a nonce, an error when it was sealed under another key or ad, or
// changed.
func (k *Key) Open(sealed, ad []byte) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(sealed) < n {
		return nil, ErrShort
	}
	return k.aead.Open(nil, sealed[:n], sealed[n:], ad)
}
