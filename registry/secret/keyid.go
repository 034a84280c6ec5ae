package secret

import (
	"errors"
	"fmt"

	"github.com/better-compute/better-compute/registry/store"
)

// ErrOtherKey is a store whose secrets are sealed with another key than a box's.
var ErrOtherKey = errors.New("the store's secrets are sealed with another key")

// ID names the box's key without revealing it (a hash of it): what the store records of
// the key its secrets are sealed with.
func (b *Box) ID() string { return b.id }

// Check reports ErrOtherKey when the store holds secrets sealed with another key than
// b's: it records another key's ID, or records none (a store from before the record, or
// a first start stopped before it recorded one) and one of its secrets does not open with
// b. A store without secrets takes any key.
func (b *Box) Check(tx *store.Tx) error {
	id, recorded, err := tx.SecretsKeyID()
	if err != nil || recorded && id == b.id {
		return err
	}
	s, held, err := tx.AnySecret()
	if err != nil || !held {
		return err
	}
	if recorded {
		return fmt.Errorf("%w: the store records key %s, and this one is %s", ErrOtherKey, id, b.id)
	}
	if _, err := b.open(s); err != nil {
		return fmt.Errorf("%w: its secret %s does not open with key %s", ErrOtherKey, s.Ref, b.id)
	}
	return nil
}

// Bind records b's key as the one the store's secrets are sealed with, after Check
// (unless force: the key that sealed them is lost, and they never open again), and
// returns the ID it replaced, if any.
func (b *Box) Bind(tx *store.Tx, force bool) (replaced string, err error) {
	id, recorded, err := tx.SecretsKeyID()
	if err != nil || recorded && id == b.id {
		return "", err
	}
	if err := b.Check(tx); err != nil && !force {
		return "", err
	}
	return id, tx.PutSecretsKey(b.id)
}
