package store

import (
	"time"

	"github.com/better-compute/better-compute/proto"
)

// SealedKeys are the registry's keys (its PKI, the secrets key, the agent endpoint's
// keys) sealed with a key-encryption key the store never holds (registry/pki): what the
// replicas of one registry share. A store has at most one such record, made by the
// first replica to start.
type SealedKeys struct {
	// KEK is the ID of the key-encryption key they are sealed with.
	KEK string `json:"kek"`
	// Ciphertext is the sealed keys.
	Ciphertext []byte    `json:"ciphertext"`
	CreatedAt  time.Time `json:"createdAt"`
}

const bucketSealedKeys = "sealed_keys"

// sealedKeysKey is the one record's key.
var sealedKeysKey = []byte("registry")

// SealedKeys returns the store's sealed keys, false when none were sealed.
func (t *Tx) SealedKeys() (SealedKeys, bool, error) {
	var k SealedKeys
	ok, err := t.get(bucketSealedKeys, sealedKeysKey, &k)
	return k, ok, err
}

// PutSealedKeys stores the registry's sealed keys, once: CONFLICT when the store holds
// some already (another replica sealed its keys first; they are the ones to use).
func (t *Tx) PutSealedKeys(k SealedKeys) error {
	if _, ok, err := t.SealedKeys(); err != nil || ok {
		if err == nil {
			err = proto.Errorf(proto.Conflict, "the store holds sealed registry keys already")
		}
		return err
	}
	k.CreatedAt = t.now
	return t.put(bucketSealedKeys, sealedKeysKey, k)
}

// DropAgentKey removes an agent endpoint key AgentKey keeps in the clear, once the
// endpoint's keys are sealed instead.
func (t *Tx) DropAgentKey(name string) error { return t.del(bucketAgentKeys, []byte(name)) }
