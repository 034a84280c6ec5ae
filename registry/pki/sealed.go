package pki

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/better-compute/better-compute/fsutil"
	"github.com/better-compute/better-compute/registry/seal"
)

// Registries that share one store (replicas) share their keys sealed in it: the PKI and
// the other rooms' secret keys travel as one bundle, encrypted (AES-256-GCM) with a
// key-encryption key (KEK) that each replica reads from a file of its own and that the
// store never holds (registry/seal). Whoever reads the store without the KEK learns none
// of the keys.

// kekSize is the KEK's length: an AES-256 key.
const kekSize = seal.KeySize

// kekPrefix starts a KEK file's one line, which is the key in hex after it.
const kekPrefix = "better-compute-kek-v1:"

// KEK is a key-encryption key: what seals the registry's keys in the store.
type KEK struct {
	key *seal.Key
	id  string
}

// ID names the KEK without revealing it (a hash of it): the sealed keys record the ID of
// the KEK they were sealed with, so a replica given another one says which it needs.
func (k *KEK) ID() string { return k.id }

func newKEK(key []byte) (*KEK, error) {
	k, err := seal.New(key)
	if err != nil {
		return nil, err
	}
	return &KEK{key: k, id: "kek_" + seal.ID("better-compute kek id", key)}, nil
}

// LoadKEK reads the KEK file at path. The file must be a regular file that no one but its
// owner can read or write (mode 0600 or stricter): the KEK opens every key of the
// registry. It is opened once and what is checked is the open file, so the file read is
// the one checked; the open does not wait, so a FIFO there is refused, not waited on.
func LoadKEK(path string) (*KEK, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("the key-encryption key %s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("the key-encryption key %s has mode %04o, so its group or others can read or change it; it opens every key of the registry: run `chmod 600 %s`", path, perm, path)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	text, ok := strings.CutPrefix(strings.TrimSpace(string(data)), kekPrefix)
	key, hexErr := hex.DecodeString(text)
	if !ok || hexErr != nil || len(key) != kekSize {
		return nil, fmt.Errorf("%s is not a key-encryption key (one line: %s and %d hex digits); copy the file the first registry made", path, kekPrefix, 2*kekSize)
	}
	return newKEK(key)
}

// CreateKEK makes a new KEK and writes it to path (mode 0600), which must not exist. The
// file appears whole and its directory is fsynced before it returns (fsutil.WriteFileNew):
// a start killed while writing it leaves no part of a KEK for the next start to refuse,
// and the keys sealed with it next never outlive it in a power loss.
func CreateKEK(path string) (*KEK, error) {
	key := seal.NewKey()
	if err := fsutil.WriteFileNew(path, []byte(kekPrefix+hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		return nil, err
	}
	return newKEK(key)
}

// LoadOrCreateKEK reads the KEK file at path, or makes it when it does not exist and
// create is true; created is true when this call made it. Whether it did is decided by
// the exclusive write of CreateKEK alone: a file another made after the read found none is
// read as one that was there, not taken as this call's.
func LoadOrCreateKEK(path string, create bool) (kek *KEK, created bool, err error) {
	kek, err = LoadKEK(path)
	if !create || !errors.Is(err, fs.ErrNotExist) {
		return kek, false, err
	}
	kek, err = CreateKEK(path)
	if errors.Is(err, fs.ErrExist) {
		kek, err = LoadKEK(path)
		return kek, false, err
	}
	return kek, err == nil, err
}

// Sealed is the registry's keys sealed with a KEK: what the store keeps.
type Sealed struct {
	// KEK is the ID of the KEK they are sealed with.
	KEK string
	// Ciphertext is the nonce, then the sealed bundle.
	Ciphertext []byte
}

// bundle is what is sealed: the PKI's keys and certificates as PEM, and other rooms'
// keys by name.
type bundle struct {
	ServingCA         string            `json:"servingCa"`
	ServingCAKey      string            `json:"servingCaKey"`
	AgentCA           string            `json:"agentCa"`
	AgentCAKey        string            `json:"agentCaKey"`
	JoinSigningKey    string            `json:"joinSigningKey"`
	JoinEncryptionKey string            `json:"joinEncryptionKey"`
	Keys              map[string][]byte `json:"keys"`
}

// sealedAD binds a ciphertext to what it is, and to the KEK's ID.
func sealedAD(kekID string) []byte {
	return []byte("better-compute sealed registry keys v1\x00" + kekID)
}

// Generate makes a new PKI in memory; nothing is written until it is sealed.
func Generate(clk Clock) (*PKI, error) {
	p := &PKI{clock: clk}
	var err error
	if p.ServingCA, p.servingCAKey, p.ServingCAPEM, _, err = newCA("better-compute serving CA", clk.Now()); err != nil {
		return nil, err
	}
	if p.AgentCA, p.agentCAKey, p.AgentCAPEM, _, err = newCA("better-compute agent CA", clk.Now()); err != nil {
		return nil, err
	}
	signing, err := newJoinSigningKey()
	if err != nil {
		return nil, err
	}
	encryption, err := newJoinEncryptionKey()
	if err != nil {
		return nil, err
	}
	return p, p.setJoinKeys(signing, encryption, "a new PKI")
}

// Seal seals the PKI and keys (other rooms' secret keys, by name) with kek.
func Seal(kek *KEK, p *PKI, keys map[string][]byte) (Sealed, error) {
	b := bundle{ServingCA: string(p.ServingCAPEM), AgentCA: string(p.AgentCAPEM), Keys: keys}
	for _, k := range []struct {
		to  *string
		key any
	}{{&b.ServingCAKey, p.servingCAKey}, {&b.AgentCAKey, p.agentCAKey}, {&b.JoinSigningKey, p.joinSigning}, {&b.JoinEncryptionKey, p.joinEncryption}} {
		keyPEM, err := privateKeyPEM(k.key)
		if err != nil {
			return Sealed{}, err
		}
		*k.to = string(keyPEM)
	}
	plain, err := json.Marshal(b)
	if err != nil {
		return Sealed{}, err
	}
	return Sealed{KEK: kek.id, Ciphertext: kek.key.Seal(plain, sealedAD(kek.id))}, nil
}

// Open opens sealed keys with kek: the PKI, its certificates issued on clk, and the
// other rooms' keys. A KEK other than the one they were sealed with is refused, naming
// the one they need.
func Open(kek *KEK, s Sealed, clk Clock) (*PKI, map[string][]byte, error) {
	if s.KEK != kek.id {
		return nil, nil, fmt.Errorf("the store's keys are sealed with key-encryption key %s, and this one is %s: copy the key-encryption key file of a registry that runs on this store", s.KEK, kek.id)
	}
	plain, err := kek.key.Open(s.Ciphertext, sealedAD(s.KEK))
	if errors.Is(err, seal.ErrShort) {
		return nil, nil, errors.New("the store's sealed keys are cut short: restore the store from a backup")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("the store's sealed keys do not open with key-encryption key %s (the record was changed, or the key file is not the one that sealed them): %w", kek.id, err)
	}
	var b bundle
	if err := json.Unmarshal(plain, &b); err != nil {
		return nil, nil, fmt.Errorf("the store's sealed keys: %w", err)
	}
	p := &PKI{clock: clk, ServingCAPEM: []byte(b.ServingCA), AgentCAPEM: []byte(b.AgentCA)}
	if p.ServingCA, p.servingCAKey, err = parseCA("the sealed serving CA", p.ServingCAPEM, []byte(b.ServingCAKey)); err != nil {
		return nil, nil, err
	}
	if p.AgentCA, p.agentCAKey, err = parseCA("the sealed agent CA", p.AgentCAPEM, []byte(b.AgentCAKey)); err != nil {
		return nil, nil, err
	}
	signing, err := parsePrivateKeyPEM("the sealed join signing key", []byte(b.JoinSigningKey))
	if err != nil {
		return nil, nil, err
	}
	encryption, err := parsePrivateKeyPEM("the sealed join encryption key", []byte(b.JoinEncryptionKey))
	if err != nil {
		return nil, nil, err
	}
	if err := p.setJoinKeys(signing, encryption, "the sealed keys"); err != nil {
		return nil, nil, err
	}
	return p, b.Keys, nil
}
