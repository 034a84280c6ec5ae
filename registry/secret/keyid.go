package secret

import (
	"fmt"

	"github.com/better-compute/better-compute/registry/store"
)

// ID names the box's key without revealing it (a hash of it): what the store records of
// the key its secrets are sealed with.
func (b *Box) ID() string { return b.id }

// Key is the box's key as the store checks it against the ID it records
// (store.Tx.CheckKey, BindKey): a store that records none but holds secrets takes it only
// when one of them opens with it.
func (b *Box) Key() store.Key {
	return store.Key{Of: store.SecretsKey, ID: b.id, Fits: b.opensOne}
}

// opensOne refuses b's key (store.ErrOtherKey) when one of the store's secrets does not
// open with it.
func (b *Box) opensOne(tx *store.Tx) error {
	s, held, err := tx.AnySecret()
	if err != nil || !held {
		return err
	}
	if _, err := b.open(s); err != nil {
		return fmt.Errorf("%w: its secret %s does not open with key %s", store.ErrOtherKey, s.Ref, b.id)
	}
	return nil
}
