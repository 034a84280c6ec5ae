package store

import "time"

// SecretsKey names the key the store's secrets are sealed with (registry/secret), never
// the key: a registry started with another key refuses to start rather than seal new
// secrets beside ones it cannot open. A store has at most one, in bucket secrets_key.
type SecretsKey struct {
	// ID is the key's ID, a hash of it (secret.Box.ID).
	ID        string    `json:"id"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// secretsKeyAt is where the one SecretsKey record is: its bucket and key.
var secretsKeyAt = struct {
	bucket string
	key    []byte
}{"secrets_key", []byte("registry")}

// SecretsKeyID returns the ID of the key the store's secrets are sealed with, false when
// none is recorded (a new store, or one from before the record).
func (t *Tx) SecretsKeyID() (string, bool, error) {
	var k SecretsKey
	ok, err := t.get(secretsKeyAt.bucket, secretsKeyAt.key, &k)
	return k.ID, ok, err
}

// PutSecretsKey records id as the ID of the key the store's secrets are sealed with.
func (t *Tx) PutSecretsKey(id string) error {
	return t.put(secretsKeyAt.bucket, secretsKeyAt.key, SecretsKey{ID: id, UpdatedAt: t.now})
}

// AnySecret returns one of the store's secrets, a node's or a tenant's, false when it
// holds none.
func (t *Tx) AnySecret() (Secret, bool, error) {
	for _, bucket := range []string{bucketSecrets, bucketTenantSecrets} {
		if k, v := t.kv.cursor(bucket).First(); k != nil {
			var s Secret
			return s, true, decode(bucket, k, v, &s)
		}
	}
	return Secret{}, false, nil
}
