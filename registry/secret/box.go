package secret

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/seal"
	"github.com/better-compute/better-compute/registry/store"
)

// KeyFile is the name of the key file in the PKI directory.
const KeyFile = "secrets.key"

// keySize is an AES-256 key.
const keySize = seal.KeySize

// Box seals and opens secrets under the registry's secret key (registry/seal), and holds
// the keys derived from it.
type Box struct {
	key *seal.Key
	// id names the key (ID).
	id string
	// cacheCap signs the capabilities of site cache URLs (CacheCapabilityKey).
	cacheCap ed25519.PrivateKey
}

// cacheCapInfo is the HKDF info of the cache capability key: what it is for, so that no
// other key derived from the secret key is it.
const cacheCapInfo = "better-compute cache capability key v1"

// ReadKey reads the key dir/secrets.key: an error wrapping fs.ErrNotExist when there is
// none.
func ReadKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, KeyFile)
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	if len(key) != keySize {
		return nil, fmt.Errorf("secret key %s: %d bytes, want %d (restore it from a backup: the secrets sealed with it cannot be opened without it)", path, len(key), keySize)
	}
	return key, nil
}

// WriteKey writes key to dir/secrets.key (0600), making dir (0700): on disk, and its
// directory fsynced, before it returns, so that the store never records a key whose
// file a power loss took.
func WriteKey(dir string, key []byte) error {
	if err := fsutil.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, KeyFile), key, 0o600)
}

// NewKey makes a new random key for New.
func NewKey() []byte { return seal.NewKey() }

// New makes a box over a 32-byte key.
func New(key []byte) (*Box, error) {
	k, err := seal.New(key)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	seed, err := hkdf.Key(sha256.New, key, nil, cacheCapInfo, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	return &Box{key: k, id: "sk_" + seal.ID("better-compute secrets key id", key), cacheCap: ed25519.NewKeyFromSeed(seed)}, nil
}

// CacheCapabilityKey is the key that signs the capabilities of site cache URLs:
// HKDF-SHA256 of the secret key, so every replica (which shares the secret key) has the
// same one and no further key is stored. Its public half goes to the sites in their
// SiteSpec.
func (b *Box) CacheCapabilityKey() ed25519.PrivateKey { return b.cacheCap }

// additionalData binds a ciphertext to where it is stored: its ref, purpose and node,
// and for a tenant's secret its tenant.
func additionalData(s store.Secret) []byte {
	ad := "better-compute secret v1\x00" + s.Ref + "\x00" + s.Purpose + "\x00" + s.NodeID
	if s.Tenant != "" {
		ad += "\x00" + s.Tenant
	}
	return []byte(ad)
}

// seal sets s.Sealed to plaintext sealed for s.
func (b *Box) seal(s *store.Secret, plaintext []byte) {
	s.Sealed = b.key.Seal(plaintext, additionalData(*s))
}

// open returns the plaintext of s, INTERNAL when it does not open for s.
func (b *Box) open(s store.Secret) ([]byte, error) {
	plain, err := b.key.Open(s.Sealed, additionalData(s))
	if errors.Is(err, seal.ErrShort) {
		return nil, fmt.Errorf("secret %s: ciphertext too short", s.Ref)
	}
	if err != nil {
		return nil, fmt.Errorf("secret %s does not open with this registry's key: %w", s.Ref, err)
	}
	return plain, nil
}

// Put seals plaintext as the node's secret of purpose, replacing the node's earlier one,
// and returns its ref.
func (b *Box) Put(tx *store.Tx, purpose, nodeID string, plaintext []byte) (string, error) {
	id := make([]byte, 16)
	rand.Read(id)
	s := store.Secret{Ref: purpose + "_" + hex.EncodeToString(id), Purpose: purpose, NodeID: nodeID}
	b.seal(&s, plaintext)
	return s.Ref, tx.PutSecret(s)
}

// Get returns the secret ref names and its plaintext. An unknown (or replaced) ref is
// NOT_FOUND; a ciphertext that does not open is INTERNAL.
func (b *Box) Get(tx *store.Tx, ref string) (store.Secret, []byte, error) {
	s, ok, err := tx.Secret(ref)
	if err != nil {
		return s, nil, err
	}
	if !ok {
		return s, nil, proto.Errorf(proto.NotFound, "secret %q not found: it was never made or a newer one replaced it", ref)
	}
	plain, err := b.open(s)
	return s, plain, err
}
