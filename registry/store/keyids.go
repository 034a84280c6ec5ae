package store

import (
	"errors"
	"fmt"
	"time"
)

// KeyID is what the store records of a key of the registry that its records depend on:
// the key's ID, a hash of it, never the key. A registry started with another key while
// the store holds records that depend on the recorded one refuses to start, rather than
// serve beside records it cannot use. A store has at most one of each key (RegistryKey),
// in a bucket of its own.
type KeyID struct {
	// ID is the key's ID (secret.Box.ID, pki.PKI.ID).
	ID        string    `json:"id"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// RegistryKey is a key of the registry whose ID the store records: the bucket of its
// one record, and the buckets of the records that depend on it.
type RegistryKey struct {
	bucket     string
	dependents []string
}

var (
	// SecretsKey is the key the store's secrets are sealed with (registry/secret), in
	// bucket secrets_key: the secrets of nodes and tenants depend on it.
	SecretsKey = RegistryKey{"secrets_key", []string{bucketSecrets, bucketTenantSecrets}}
	// PKIKey is the registry's PKI (registry/pki: its CAs and join keys), in bucket
	// pki_key: every agent that joined (a node's or a site's) holds its pins and a
	// certificate of its agent CA, and every join token was handed out with its pins.
	PKIKey = RegistryKey{"pki_key", []string{bucketAgentJoins, bucketJoinTokens}}
)

// keyIDKey is the key of a RegistryKey's one record in its bucket.
var keyIDKey = []byte("registry")

// KeyIDOf returns the ID the store records of k, false when it records none (a new store,
// or one from before the record).
func (t *Tx) KeyIDOf(k RegistryKey) (string, bool, error) {
	var rec KeyID
	ok, err := t.get(k.bucket, keyIDKey, &rec)
	return rec.ID, ok, err
}

// PutKeyID records id as the ID of k.
func (t *Tx) PutKeyID(k RegistryKey, id string) error {
	return t.put(k.bucket, keyIDKey, KeyID{ID: id, UpdatedAt: t.now})
}

// ErrOtherKey is a store whose records depend on another key than the one checked.
var ErrOtherKey = errors.New("the store's records depend on another key")

// Key is one key of the registry as the store checks it against its record: which key,
// its ID, and what tells, in a store that records no ID of it, whether it is the key its
// records depend on.
type Key struct {
	Of RegistryKey
	ID string
	// Fits returns an error wrapping ErrOtherKey when the store, which records no ID of
	// the key and holds records that depend on it, holds ones this key does not fit; nil
	// takes the key (nothing in the store tells).
	Fits func(*Tx) error
}

// CheckKey reports ErrOtherKey when the store holds records that depend on another key
// than k: it records another key's ID, or records none (a store from before the record,
// or a first start stopped before it recorded one) and k.Fits refuses k. A store without
// records that depend on the key takes any.
func (t *Tx) CheckKey(k Key) error {
	id, recorded, err := t.KeyIDOf(k.Of)
	if err != nil {
		return err
	}
	return t.checkKey(k, id, recorded)
}

// checkKey is CheckKey of a store that records id of k's key (recorded) or none.
func (t *Tx) checkKey(k Key, id string, recorded bool) error {
	if recorded && id == k.ID || !t.holdsAny(k.Of.dependents) {
		return nil
	}
	if recorded {
		return fmt.Errorf("%w: the store records key %s, and this one is %s", ErrOtherKey, id, k.ID)
	}
	if k.Fits != nil {
		return k.Fits(t)
	}
	return nil
}

// BindKey records k's ID, after CheckKey (unless force: the key the store's records
// depend on is lost, and they never work again), and returns the ID it replaced, if any.
func (t *Tx) BindKey(k Key, force bool) (replaced string, err error) {
	id, recorded, err := t.KeyIDOf(k.Of)
	if err != nil || recorded && id == k.ID {
		return "", err
	}
	if !force {
		if err := t.checkKey(k, id, recorded); err != nil {
			return "", err
		}
	}
	return id, t.PutKeyID(k.Of, k.ID)
}

// holdsAny reports whether one of the buckets holds a record.
func (t *Tx) holdsAny(buckets []string) bool {
	for _, bucket := range buckets {
		if k, _ := t.kv.cursor(bucket).First(); k != nil {
			return true
		}
	}
	return false
}

// AnySecret returns one of the store's secrets, a node's or a tenant's, false when it
// holds none.
func (t *Tx) AnySecret() (Secret, bool, error) {
	for _, bucket := range SecretsKey.dependents {
		if k, v := t.kv.cursor(bucket).First(); k != nil {
			var s Secret
			return s, true, decode(bucket, k, v, &s)
		}
	}
	return Secret{}, false, nil
}
