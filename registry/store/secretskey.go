package store

import "time"

// SecretsKey names the key the store's secrets are sealed with (registry/secret), never
// the key: a registry started with another key refuses to start rather than seal new
// secrets beside ones it cannot open.
type SecretsKey struct {
	// ID is the key's ID, a hash of it (secret.KeyID).
	ID        string    `json:"id"`
	UpdatedAt time.Time `json:"updatedAt"`
}

const bucketSecretsKey = "secrets_key"

// secretsKeyKey is the one record's key.
var secretsKeyKey = []byte("registry")

// SecretsKey returns the ID of the key the store's secrets are sealed with, false when
// none is recorded (a new store, or one from before the record).
func (t *Tx) SecretsKey() (SecretsKey, bool, error) {
	var k SecretsKey
	ok, err := t.get(bucketSecretsKey, secretsKeyKey, &k)
	return k, ok, err
}

// PutSecretsKey records id as the ID of the key the store's secrets are sealed with.
func (t *Tx) PutSecretsKey(id string) error {
	return t.put(bucketSecretsKey, secretsKeyKey, SecretsKey{ID: id, UpdatedAt: t.now})
}

// AnySecret returns one of the store's secrets, a node's or a tenant's, false when it
// holds none.
func (t *Tx) AnySecret() (Secret, bool, error) {
	for _, bucket := range []string{bucketSecrets, bucketTenantSecrets} {
		k, v := t.kv.cursor(bucket).First()
		if k != nil {
			var s Secret
			return s, true, decode(bucket, k, v, &s)
		}
	}
	return Secret{}, false, nil
}
